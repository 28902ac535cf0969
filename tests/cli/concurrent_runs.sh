#!/usr/bin/env bash
# Two runs started together into one output directory: exactly one runs, the other is refused
# naming the directory, and metrics.jsonl holds one run (tests/cli/CMakeLists.txt: cli_concurrent_runs).
# Then pairs of `--resume auto` runs: never interleaved, whichever order they take.
#   concurrent_runs.sh MIXTRAIN WORKDIR [PAIRS]
set -uo pipefail
mixtrain=$1 work=$2 pairs=${3:-20}
rm -rf "$work" && mkdir -p "$work"
steps=12
failures=0
train=(train --model mlp --data synthetic:64 --batch-size 16 --steps "$steps" --threads 1 --checkpoint-every 4)
# metrics.jsonl of DIR holds steps 1..N once each, in order.
one_run_of_metrics() {
  local got
  got=$(grep -o '"step": *[0-9]*' "$1/metrics.jsonl" | grep -o '[0-9]*$' | tr '\n' ' ')
  [[ "$got" == "$(seq -s ' ' 1 "$steps") " ]]
}
for ((i = 0; i < pairs; ++i)); do
  dir="$work/pair-$i"
  "$mixtrain" "${train[@]}" --out "$dir" >"$work/a.out" 2>"$work/a.err" &
  a=$!
  "$mixtrain" "${train[@]}" --out "$dir" >"$work/b.out" 2>"$work/b.err" &
  b=$!
  wait $a; ra=$?
  wait $b; rb=$?
  if ((ra == 0 && rb != 0)); then loser=b; elif ((rb == 0 && ra != 0)); then loser=a; else loser=; fi
  if [[ -z "$loser" ]]; then
    echo "FAIL pair $i: exit codes $ra and $rb (one must run, one be refused)"
    failures=$((failures + 1))
  elif ! grep -q "$dir" "$work/$loser.err"; then
    echo "FAIL pair $i: the refusal does not name the directory: $(cat "$work/$loser.err")"
    failures=$((failures + 1))
  elif ! one_run_of_metrics "$dir"; then
    echo "FAIL pair $i: metrics.jsonl does not hold one run"
    failures=$((failures + 1))
  else
    echo "ok pair $i: refused: $(cat "$work/$loser.err")"
  fi
done
for ((i = 0; i < 3; ++i)); do
  dir="$work/auto-$i"
  "$mixtrain" "${train[@]}" --resume auto --out "$dir" >/dev/null 2>"$work/a.err" &
  a=$!
  "$mixtrain" "${train[@]}" --resume auto --out "$dir" >/dev/null 2>"$work/b.err" &
  b=$!
  wait $a; ra=$?
  wait $b; rb=$?
  if ((ra != 0 && rb != 0)) || ! one_run_of_metrics "$dir"; then
    echo "FAIL auto pair $i: exit codes $ra and $rb, metrics: $(grep -o '"step": *[0-9]*' "$dir/metrics.jsonl" | tr '\n' ' ')"
    failures=$((failures + 1))
  else
    echo "ok auto pair $i: exit codes $ra and $rb"
  fi
done
echo "concurrent runs: $((pairs + 3 - failures)) pairs as expected, $failures not"
((failures == 0))
