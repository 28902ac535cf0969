#!/usr/bin/env bash
# Trains small runs with the mixtrain CLI and checks that each checkpoint loads into the equivalent
# PyTorch model by name and gives the same test accuracy (bench/verify_pytorch_checkpoint.py, with
# Debian's python3-torch).
#
#   bench/verify_checkpoint.sh [OUT_DIR]         (default /tmp/mixtrain-verify-checkpoint)
#
# Runs:  mlp  fp32  1 epoch on Fashion-MNIST
#        cnn  bf16  1 epoch on Fashion-MNIST
#        gpt  bf16  10 steps of batch 8 on /usr/share/common-licenses/GPL-3 (validation loss compared)
# About 2-3 minutes on 2 cores. Environment: MIXTRAIN (the CLI binary, default
# build-cli/tools/mixtrain/mixtrain, else build/tools/mixtrain/mixtrain), PYTHON (default
# /usr/bin/python3: Debian's interpreter with python3-torch and python3-numpy), THREADS (default 2),
# SKIP_GPT=1 to leave out the gpt run. Exit status: 0 when every check passes, 1 otherwise.
set -u -o pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-/tmp/mixtrain-verify-checkpoint}
threads=${THREADS:-2}
python=${PYTHON:-/usr/bin/python3}
if [[ -z "${MIXTRAIN:-}" ]]; then
  for c in "$root/build-cli/tools/mixtrain/mixtrain" "$root/build/tools/mixtrain/mixtrain"; do
    [[ -x "$c" ]] && MIXTRAIN=$c && break
  done
fi
if [[ ! -x "${MIXTRAIN:-}" ]]; then
  echo "error: no mixtrain binary; build it (cmake --build build --target mixtrain_cli) or set MIXTRAIN" >&2
  exit 2
fi
if ! "$python" -c 'import torch, numpy' 2>/dev/null; then
  echo "error: $python cannot import torch and numpy (apt-get install python3-torch python3-numpy)" >&2
  exit 2
fi
export OMP_NUM_THREADS=$threads
text=/usr/share/common-licenses/GPL-3

echo "mixtrain: $MIXTRAIN"
echo "python:   $python, torch $("$python" -c 'import torch; print(torch.__version__)')"
echo "threads:  $threads, output in $out"

names=() results=()
run() {  # run NAME "TRAIN FLAGS" "VERIFY FLAGS"
  local name=$1 dir=$out/$1
  rm -rf "$dir"
  echo
  echo "=== $name: mixtrain train $2"
  # shellcheck disable=SC2086
  if ! "$MIXTRAIN" train $2 --threads "$threads" --out "$dir" >"$out/$name.train.log" 2>&1; then
    cat "$out/$name.train.log"
    names+=("$name") results+=("FAIL (training)")
    return
  fi
  grep -E '^(done|  test accuracy|  test loss)' "$out/$name.train.log"
  echo "--- verify_pytorch_checkpoint.py $dir${3:+ $3}"
  # shellcheck disable=SC2086
  if "$python" "$root/bench/verify_pytorch_checkpoint.py" "$dir" $3 --threads "$threads"; then
    names+=("$name") results+=("PASS")
  else
    names+=("$name") results+=("FAIL")
  fi
}

mkdir -p "$out"
run mlp-fp32 "--model mlp --data fashion-mnist --precision fp32 --epochs 1" ""
run cnn-bf16 "--model cnn --data fashion-mnist --precision bf16 --epochs 1" ""
if [[ "${SKIP_GPT:-0}" != 1 && -r "$text" ]]; then
  run gpt-bf16 "--model gpt --data text:$text --precision bf16 --steps 10 --batch-size 8" "--data text:$text"
fi

echo
echo "=== summary"
status=0
for i in "${!names[@]}"; do
  printf '%-10s %s\n' "${names[$i]}" "${results[$i]}"
  [[ "${results[$i]}" == PASS ]] || status=1
done
exit $status
