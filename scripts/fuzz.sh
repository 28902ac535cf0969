#!/usr/bin/env bash
# Fuzzes every reader of untrusted input with libFuzzer: safetensors files, training checkpoints,
# IDX (plain and gzip) files, text datasets, TensorBoard event files and the command line. Builds the
# harnesses of tests/fuzz with Clang in build-fuzz/ (everything instrumented with ASan and UBSan),
# replays each seed corpus (tests/fuzz/corpus/<harness>/), then fuzzes each harness for FUZZ_SECONDS
# (default 20).
# New inputs go to runs/fuzz/corpus/<harness>/ (not into the repository); a crash, leak, sanitizer
# report or timeout stops the script with the input saved as runs/fuzz/<harness>-crash-*.
#
#   scripts/fuzz.sh                   # replay + 20 s per harness
#   FUZZ_SECONDS=600 scripts/fuzz.sh  # longer
#   scripts/fuzz.sh checkpoint idx    # only these harnesses
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

seconds="${FUZZ_SECONDS:-20}"
harnesses=("$@")
((${#harnesses[@]})) || harnesses=(safetensors checkpoint idx text cli_args gpt2 tokenizer event_file)

mt_install_packages "$MT_ROOT/scripts/packages.txt"
mt_install_packages "$MT_ROOT/scripts/packages-fuzz.txt"
MT_BUILD_DIR="${MT_FUZZ_BUILD_DIR:-$MT_ROOT/build-fuzz}"
# -O1 keeps the instrumented build and its runs fast; -g1 gives line numbers in reports.
MT_BUILD_TYPE=RelWithDebInfo
MT_CMAKE_OPTIONS=(-DCMAKE_CXX_COMPILER=clang++-14 "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" -DMIXTRAIN_FUZZ=ON
  -DMIXTRAIN_BUILD_TESTS=OFF -DMIXTRAIN_BUILD_BENCH=OFF -DMIXTRAIN_BUILD_EXAMPLES=OFF -DMIXTRAIN_BUILD_CLI=ON)
mt_build "${harnesses[@]/#/fuzz_}"

cd "$MT_ROOT"
mkdir -p runs/fuzz
export OMP_NUM_THREADS=1
# Leaks and undefined behaviour are findings too.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
for h in "${harnesses[@]}"; do
  bin="$MT_BUILD_DIR/tests/fuzz/fuzz_$h"
  seeds="tests/fuzz/corpus/$h"
  mt_heading "fuzz_$h: replaying $(find "$seeds" -type f | wc -l) seed inputs"
  "$bin" -runs=0 -artifact_prefix="runs/fuzz/$h-" "$seeds" 2>&1 | tail -n 2
  mt_heading "fuzz_$h: fuzzing for $seconds s"
  mkdir -p "runs/fuzz/corpus/$h"
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="runs/fuzz/$h-" "runs/fuzz/corpus/$h" "$seeds" 2>"runs/fuzz/$h.log" ||
    { tail -n 60 "runs/fuzz/$h.log"; mt_die "fuzz_$h found a problem (input saved under runs/fuzz/)"; }
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb|stat::new_units_added" "runs/fuzz/$h.log" |
    tr '\n' ' '
  echo
done
echo "fuzzing done: ${harnesses[*]} clean (${seconds} s each)"
