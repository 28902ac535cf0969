#!/usr/bin/env bash
# Numbers that are not numbers, empty paths and the wrong weights, on every command: each is refused
# in one line naming the flag or the file (tests/cli/CMakeLists.txt: cli_hostile_flags). Values that
# CMake lists cannot carry (the empty string) are why this is a script.
#   hostile_flags.sh MIXTRAIN WORKDIR FIXTURES CORPUS
set -uo pipefail
mixtrain=$(realpath "$1") work=$(realpath -m "$2") fixtures=$(realpath "$3") corpus=$(realpath "$4")
rm -rf "$work" && mkdir -p "$work"
cd "$work" || exit 1  # so that a run into the default directory (runs/train) would show here
failures=0
# refuse REGEX ARGS...: non-zero exit, one line on stderr matching REGEX, at most 600 bytes. (A flag
# with a range may be refused by its range check before the number check: either names the flag.)
refuse() {
  local regex=$1
  shift
  local err
  err=$("$mixtrain" "$@" 2>&1 >/dev/null)
  local rc=$?
  local lines
  lines=$(printf '%s' "$err" | grep -c '')
  if ((rc == 0)) || ((lines != 1)) || ((${#err} > 600)) || ! grep -Eq -- "$regex" <<<"$err"; then
    echo "FAIL: mixtrain $* -> exit $rc, $lines lines: ${err:0:700}"
    failures=$((failures + 1))
  else
    echo "ok (refused): mixtrain $* -> $err"
  fi
}
accept() {
  if ! "$mixtrain" "$@" >"$work/accept.log" 2>&1; then
    echo "FAIL: mixtrain $* was refused: $(tail -c 600 "$work/accept.log")"
    failures=$((failures + 1))
  else
    echo "ok (accepted): mixtrain $*"
  fi
}
train=(train --model mlp --data synthetic:32 --batch-size 16 --steps 1 --threads 1)

refuse '--seed.*empty' "${train[@]}" --seed '' --out "$work/a"
refuse '--seed.*negative' "${train[@]}" --seed -1 --out "$work/a"
refuse '--seed.*out of range' "${train[@]}" --seed 18446744073709551616 --out "$work/a"
refuse '--seed.*leading zeros' "${train[@]}" --seed 010 --out "$work/a"
refuse '--seed.*not a decimal integer' "${train[@]}" --seed 0x10 --out "$work/a"
refuse '--lr: ' "${train[@]}" --lr '' --out "$work/a"
refuse '--lr.*not a decimal number' "${train[@]}" --lr nan --out "$work/a"
refuse '--lr: ' "${train[@]}" --lr 1e999 --out "$work/a"
refuse '--batch-size: ' "${train[@]}" --batch-size '' --out "$work/a"
refuse '--steps: ' "${train[@]}" --steps 1.5 --out "$work/a"
refuse '--threads: ' "${train[@]}" --threads '' --out "$work/a"
refuse '--out.*must not be empty' "${train[@]}" --out ''
refuse '--out.*must not be empty' compare --model mlp --data synthetic:32 --steps 1 --out ''
refuse '--steps: ' bench --model mlp --steps ''
refuse '--tokens.*empty' generate --model gpt2 --weights "$fixtures/tiny-gpt2" --tokens ''
refuse '--tokens.*not a decimal integer' generate --model gpt2 --weights "$fixtures/tiny-gpt2" --tokens 1,x
refuse '--seed.*negative' generate --model gpt2 --weights "$fixtures/tiny-gpt2" --tokens 1 --seed -1
refuse '--max-new-tokens: ' generate --model gpt2 --weights "$fixtures/tiny-gpt2" --tokens 1 --max-new-tokens ''
refuse '--temperature: ' generate --model gpt2 --weights "$fixtures/tiny-gpt2" --tokens 1 --temperature ''
[[ -e runs/train ]] && { echo "FAIL: --out '' trained into runs/train"; failures=$((failures + 1)); }
# The largest seed is a seed.
accept "${train[@]}" --seed 18446744073709551615 --out "$work/max-seed"
grep -q '"seed": *18446744073709551615' "$work/max-seed/summary.json" ||
  { echo "FAIL: summary.json lacks the seed"; failures=$((failures + 1)); }

# The wrong weights for generate: one line naming the file.
refuse 'model.safetensors.*not a GPT' generate --model gpt --weights "$fixtures/tiny-gpt2/model.safetensors" --tokens 1,2
accept train --model gpt --context 16 --data "text:$corpus" --batch-size 2 --steps 2 --threads 1 --zero 1 --out "$work/zero"
refuse 'zero-0-of-1.safetensors.*shard' generate --model gpt --weights "$work/zero/checkpoint.zero-0-of-1.safetensors" --tokens 1,2
accept train --model mlp --data synthetic:32 --batch-size 16 --steps 1 --threads 1 --out "$work/mlp"
refuse 'checkpoint.safetensors.*not a GPT' generate --model gpt --weights "$work/mlp/checkpoint.safetensors" --tokens 1,2

echo "hostile flags: $failures failures"
((failures == 0))
