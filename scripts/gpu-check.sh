#!/usr/bin/env bash
# The one-shot GPU check, run ON the lent H200 machine (device tool `run`), in about 8 minutes:
#
#   run  command: bash scripts/gpu-check.sh "$OUT"     carry: [".gpu-debs"]     timeout_s: 570
#   run  command: bash scripts/gpu-check.sh --quick "$OUT"   (build + tests + nccl + sanitizer: under 4 minutes)
#
# Before it, HERE: scripts/gpu-check-prepare.sh (downloads the Debian .debs into .gpu-debs/ and stages
# compute-sanitizer in .gpu-debs/compute-sanitizer/). The
# machine has nvcc 13.0, CMake, ninja, Python 3.12 + PyTorch 2.11 and no package registry; the .debs
# are unpacked with dpkg -x into a private prefix (.gpu-deps/ in the repository), never into /.
#
# The build (build-gpu/) and the prefix lie in the repository, git-ignored: the device tool keeps
# ignored build outputs between calls while the machine stays warm, so a second call can skip the
# build (MT_GPU_CHECK_SKIP_BUILD=1): first `--quick` (build + tests), fix, then the full check.
#
# Phases (each under its own timeout, clipped to a global budget; a phase that fails or times out is
# recorded and the next one runs; raw outputs go to a work dir, results and logs to the output dir):
#   inventory      nvidia-smi, nvcc/CMake/torch versions, cuDNN/cuBLASLt/NCCL locations  -> env.json
#   build          unpack .gpu-debs, configure (Release, Ninja, MIXTRAIN_CUDA=ON, MIXTRAIN_MPI=OFF, sm_90)
#                  and build mixtrain_tests, mixtrain_nccl_smoke (when NCCL was found), the mixtrain CLI
#                  and cuda_gemm_bench                                                       -> build.log
#   tests          1. the CUDA-vs-CPU tests: mixtrain_tests --gtest_filter='Cuda*:CachingAllocator*'
#                  2. placement on cuda: the *Placement* suites with MIXTRAIN_PLACEMENT_DEVICE=cuda
#                     (every model built on the CPU, moved with .to(cuda), default device left alone)
#                  3. the device-generic suites (MIXTRAIN_CHECKED_SUITES of tests/CMakeLists.txt, less
#                     MIXTRAIN_CUDA_SKIPPED_SUITES) with MIXTRAIN_TEST_DEVICE=cuda
#                                                                                -> tests.log, tests.json
#   nccl           mixtrain_nccl_smoke (tests/cuda/nccl_smoke.cpp): NCCL in a world of one GPU (unique id,
#                  connect, all_reduce/broadcast of CUDA tensors, DDP over a CUDA model on the NCCL path)
#                                                                                -> tests.log, tests.json
#   sanitizer      mixtrain_tests under NVIDIA's compute-sanitizer, one run and one summary row per tool,
#                  each under its own timeout, with --error-exitcode 86: a report fails the run even when
#                  every test passed (and a run is ok only when the tool's ERROR/RACECHECK SUMMARY says 0)
#                    memcheck   60 s  the CUDA-vs-CPU filter above, every kernel (cuBLASLt and cuDNN too:
#                                     they read and write mixtrain's buffers), --leak-check no (the caching
#                                     allocator keeps its segments for the life of the process by design)
#                    racecheck  30 s  the suites whose kernels use shared memory and barriers (flash
#                    synccheck  30 s  attention, softmax, layer norm, cross-entropy, batch norm, reductions,
#                                     row sums, grad-norm partials), mixtrain's own kernels only
#                  The tool: the toolkit's own compute-sanitizer (next to nvcc, or on PATH), else the copy
#                  staged in .gpu-debs/compute-sanitizer/; none that runs is a failure of each tool's row.
#                  Under gVisor the tool has been seen refusing the device ("Device not supported"): the
#                  rows then fail with that line (it ran on a Firecracker machine).
#                  Time: in --quick right after nccl, ending by the 4 minutes --quick keeps to (a tool with
#                  under 15 s left is skipped, "budget spent"); in the full check after torch_eager, so that
#                  the issue's targets keep their time and torch_compile (informational) yields it.
#                                                  -> memcheck/racecheck/synccheck rows, tests.log, tests.json
#   gemm           cuda_gemm_bench --json, bench/gpu/torch_gemm.py          -> bench.json, torch.json
#   mixtrain_gpt   mixtrain bench --device cuda --model gpt-small --precision fp32|bf16|fp16 --json
#   torch_eager    bench/gpu/torch_gpt.py (fp32 TF32-off, bf16 autocast, fp16 autocast + GradScaler)
#   torch_compile  the same under torch.compile (bf16), in a child process under a hard timeout
# After every phase bench/gpu/gpu_summary.py rewrites summary.json and the JSON files from what exists
# so far (a check cut short still leaves its results), and at the end prints the table: per phase
# status, rc, seconds, headline; the issue's targets with PASS/FAIL. At most 8 files land in the output dir:
# summary.json env.json build.log tests.log tests.json bench.log bench.json torch.json; logs are cut
# to their first 256 KiB + last 1.75 MiB.
#
# Settings (environment):
#   MT_GPU_CHECK_BUDGET=480       seconds for all phases; each phase's timeout is clipped to what is left
#   MT_GPU_CHECK_PHASES=inventory,build,tests,nccl,gemm,mixtrain,torch,sanitizer,compile   the phases to run
#                                 (sanitizer alone on a kept build: MT_GPU_CHECK_SKIP_BUILD=1
#                                 MT_GPU_CHECK_PHASES=inventory,build,sanitizer, without --quick: 120 s)
#   MT_GPU_CHECK_QUICK_LIMIT=240  --quick: the second by which the sanitizer stage must end
#   MT_COMPUTE_SANITIZER=<path>   this compute-sanitizer and no other
#   MT_SANITIZER_TOOLS=memcheck,racecheck,synccheck
#   MT_SANITIZER_MEMCHECK_FILTER='Cuda*:CachingAllocator*'   MT_SANITIZER_SHARED_FILTER=<the suites above>
#   MT_SANITIZER_ARGS=            more compute-sanitizer options for every tool (split at spaces)
#   MT_GPU_CHECK_SKIP_BUILD=1     no unpack/configure/build (use the prefix and binaries of an earlier call)
#   MT_GPU_CHECK_CONFIGURE_ONLY=1 unpack + configure, no compile (also without a GPU: a dry run here)
#   MT_GPU_CHECK_CUDA=ON          MIXTRAIN_CUDA for the configure (OFF for a CPU-only dry run)
#   MT_GPT_BATCH=16               GPT-small batch (sequences of 1024 tokens) for mixtrain and torch
#   MT_GEMM_TOKENS=8192           M of the GPT-shaped GEMMs in torch_gemm.py
#   MT_TORCH_COMPILE_PRECISIONS=bf16
#   MT_GPU_DEPS_PREFIX=<repo>/.gpu-deps MT_GPU_BUILD_DIR=<repo>/build-gpu MT_GPU_WORK_DIR=/tmp/mtgpu-work
#   MT_GPU_DEBS=<repo>/.gpu-debs  MT_PYTHON=python3  MT_GPU_CHECK_JOBS=<nproc>
# --quick: MT_GPU_CHECK_PHASES=inventory,build,tests,nccl,sanitizer and only the test binaries are built.
# Exit status: 0 when every phase ended ok (or was skipped for want of a GPU), else 1; 2 on bad usage.
set -u
set -o pipefail

QUICK=0
if [[ "${1:-}" == --quick ]]; then
  QUICK=1
  shift
fi
if (($# != 1)) || [[ "$1" == -* ]]; then
  echo "usage: scripts/gpu-check.sh [--quick] OUTPUT_DIR" >&2
  exit 2
fi
mkdir -p "$1" || exit 2
OUT="$(cd "$1" && pwd)"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2

PREFIX="${MT_GPU_DEPS_PREFIX:-$ROOT/.gpu-deps}"
BUILD="${MT_GPU_BUILD_DIR:-$ROOT/build-gpu}"
WORK="${MT_GPU_WORK_DIR:-/tmp/mtgpu-work}"
DEBS="${MT_GPU_DEBS:-$ROOT/.gpu-debs}"
BUDGET="${MT_GPU_CHECK_BUDGET:-480}"
PHASES="${MT_GPU_CHECK_PHASES:-inventory,build,tests,nccl,gemm,mixtrain,torch,sanitizer,compile}"
((QUICK)) && PHASES=inventory,build,tests,nccl,sanitizer
QUICK_LIMIT="${MT_GPU_CHECK_QUICK_LIMIT:-240}"
CUDA_TESTS_FILTER='Cuda*:CachingAllocator*'
SAN_TOOLS="${MT_SANITIZER_TOOLS:-memcheck,racecheck,synccheck}"
SAN_MEMCHECK_FILTER="${MT_SANITIZER_MEMCHECK_FILTER:-$CUDA_TESTS_FILTER}"
# The suites whose kernels use shared memory and barriers: flash attention (tensor-core path at T=130,
# warp path on misaligned rows), softmax, layer norm, cross-entropy, batch norm, reductions, row sums
# and the grad-norm partials.
SAN_SHARED_FILTER="${MT_SANITIZER_SHARED_FILTER:-CudaAttention.BackwardIsDeterministic:CudaAttention.UnalignedRows*:CudaNn.Softmax*:CudaNn.LayerNorm*:CudaLoss.CrossEntropy*:CudaBatchNorm.*:CudaReduce.*:CudaSums.*:CudaOptim.ClipGradNorm*}"
SKIP_BUILD="${MT_GPU_CHECK_SKIP_BUILD:-0}"
CONFIGURE_ONLY="${MT_GPU_CHECK_CONFIGURE_ONLY:-0}"
CUDA_MODE="${MT_GPU_CHECK_CUDA:-ON}"
BATCH="${MT_GPT_BATCH:-16}"
GEMM_TOKENS="${MT_GEMM_TOKENS:-8192}"
COMPILE_PRECISIONS="${MT_TORCH_COMPILE_PRECISIONS:-bf16}"
PY="${MT_PYTHON:-python3}"
JOBS="${MT_GPU_CHECK_JOBS:-$(nproc 2>/dev/null || echo 8)}"
BUILD_CAP=225  # seconds for the compile itself (about 1700 CPU-seconds of C++ and the CUDA files)
RESERVE_TORCH=45  # seconds kept back for the torch_eager phase by the phases before it
LOG_KEEP_HEAD=262144
LOG_KEEP_TAIL=1835008

BUILD_LOG="$OUT/build.log"
TESTS_LOG="$OUT/tests.log"
BENCH_LOG="$OUT/bench.log"

now_ms() { date +%s%3N; }
START_MS="$(now_ms)"
elapsed_s() { echo $((($(now_ms) - START_MS) / 1000)); }
left_s() { echo $((BUDGET - $(elapsed_s))); }
# The smaller of $1 and the budget left (never below 0).
cap_s() {
  local c="$1" l
  l="$(left_s)"
  ((l < c)) && c="$l"
  ((c < 0)) && c=0
  echo "$c"
}
# cap_res SECONDS RESERVE: as cap_s, keeping RESERVE seconds of the budget for the PyTorch eager baseline
# (the mixtrain-vs-PyTorch target needs it; a hanging earlier phase must not eat its time).
cap_res() {
  local c="$1" l
  l=$(($(left_s) - $2))
  ((l < c)) && c="$l"
  ((c < 0)) && c=0
  echo "$c"
}
min() { if (($1 < $2)); then echo "$1"; else echo "$2"; fi; }
since_s() { echo $((($(now_ms) - $1) / 1000)); }
want() { [[ ",$PHASES," == *",$1,"* ]]; }
say() { printf '[%4ss] %s\n' "$(elapsed_s)" "$*"; }
status_of() {
  case "$1" in
    0) echo ok ;;
    124 | 137) echo timeout ;;
    *) echo fail ;;
  esac
}
# runs_status RC FILE: a torch_gpt.py phase's status from its exit status and its JSON lines: ok only
# when every run reports "ok" (a run killed by the compile timeout says "timeout").
runs_status() {
  if (($1 != 0)); then
    status_of "$1"
  elif grep -q '"status": "timeout"' "$2"; then
    echo timeout
  elif grep -q '"status": "ok"' "$2" && ! grep -v '"status": "ok"' "$2" | grep -q '"status"'; then
    echo ok
  else
    echo fail
  fi
}
# record PHASE STATUS RC START_MS NOTE: one line of WORK/phases.tsv (read by gpu_summary.py), then the
# output files rewritten from everything so far, so that a check cut short keeps its results.
record() {
  local note
  note="$(printf '%s' "${5:-}" | tr '\t\r\n' '   ' | cut -c1-400)"
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(($(now_ms) - $4))" "$note" >>"$WORK/phases.tsv"
  say "phase $1: $2 (rc $3)${note:+ - $note}"
  timeout 30 "$PY" bench/gpu/gpu_summary.py summary --work "$WORK" --out "$OUT" --budget "$BUDGET" --quiet \
    >/dev/null 2>>"$BENCH_LOG" || true
}
# run_to SECONDS LOG CMD...: CMD with stdout and stderr appended to LOG, killed (with its process
# group) after SECONDS; sets RC (124 or 137 on timeout).
run_to() {
  local t="$1" log="$2"
  shift 2
  if ((t < 1)); then
    RC=124
    printf '\n(no time left in the budget for: %s)\n' "$*" >>"$log"
    return
  fi
  printf '\n+ %s   [timeout %ss]\n' "$*" "$t" >>"$log"
  timeout -k 5 "$t" "$@" >>"$log" 2>&1
  RC=$?
  ((RC == 0)) || printf '(exit status %s)\n' "$RC" >>"$log"
}
# run_split SECONDS STDOUT_FILE LOG CMD...: as run_to, but stdout alone goes to STDOUT_FILE.
run_split() {
  local t="$1" out="$2" log="$3"
  shift 3
  : >"$out"
  if ((t < 1)); then
    RC=124
    printf '\n(no time left in the budget for: %s)\n' "$*" >>"$log"
    return
  fi
  printf '\n+ %s   [timeout %ss]\n' "$*" "$t" >>"$log"
  timeout -k 5 "$t" "$@" >"$out" 2>>"$log"
  RC=$?
  ((RC == 0)) || printf '(exit status %s)\n' "$RC" >>"$log"
}
# Keeps a log's first and last bytes when it is over ~2 MB.
trim_log() {
  local f="$1" size
  [[ -f "$f" ]] || return 0
  size="$(stat -c %s "$f")"
  ((size > LOG_KEEP_HEAD + LOG_KEEP_TAIL)) || return 0
  {
    head -c "$LOG_KEEP_HEAD" "$f"
    printf '\n\n[... %s bytes cut ...]\n\n' "$((size - LOG_KEEP_HEAD - LOG_KEEP_TAIL))"
    tail -c "$LOG_KEEP_TAIL" "$f"
  } >"$f.cut" && mv -f "$f.cut" "$f"
}
# Unpacks one .deb into a prefix: dpkg-deb where present, else ar + tar.
unpack_deb() {
  local deb="$1" dest="$2" member flag
  if command -v dpkg-deb >/dev/null 2>&1; then
    dpkg-deb -x "$deb" "$dest"
    return
  fi
  member="$(ar t "$deb" | grep '^data\.tar')" || return 1
  case "$member" in
    *.xz) flag=-J ;;
    *.zst) flag=--zstd ;;
    *.gz) flag=-z ;;
    *) flag= ;;
  esac
  ar p "$deb" "$member" | tar -x ${flag:+"$flag"} -C "$dest" -f -
}

# Output and work folders: only what this script writes; the work folder is emptied (under /tmp only).
case "$WORK" in /tmp/?*) rm -rf "$WORK" ;; esac
mkdir -p "$WORK" || exit 2
: >"$WORK/phases.tsv"
rm -f "$OUT"/summary.json "$OUT"/env.json "$OUT"/tests.json "$OUT"/bench.json "$OUT"/torch.json
: >"$BUILD_LOG"
: >"$TESTS_LOG"
: >"$BENCH_LOG"
say "mixtrain GPU check: repo $ROOT, output $OUT, work $WORK, budget ${BUDGET}s, phases $PHASES"

# --- a. inventory ------------------------------------------------------------------------------------
t0="$(now_ms)"
NVSMI=""
for c in "$(command -v nvidia-smi 2>/dev/null)" /usr/local/nvidia/bin/nvidia-smi /usr/bin/nvidia-smi; do
  if [[ -n "$c" && -x "$c" ]]; then
    NVSMI="$c"
    break
  fi
done
NVCC=""
for c in "${CUDACXX:-}" "$(command -v nvcc 2>/dev/null)" /usr/local/cuda/bin/nvcc /usr/local/cuda-13.0/bin/nvcc; do
  if [[ -n "$c" && -x "$c" ]]; then
    NVCC="$c"
    break
  fi
done
HAVE_GPU=0
if [[ -n "$NVSMI" ]] && timeout 20 "$NVSMI" -L >"$WORK/nvidia-smi-L.txt" 2>&1 && grep -q '^GPU ' "$WORK/nvidia-smi-L.txt"; then
  HAVE_GPU=1
fi
if want inventory; then
  run_to "$(cap_s 60)" "$BENCH_LOG" "$PY" bench/gpu/gpu_summary.py env --out "$OUT/env.json" \
    --nvcc "$NVCC" --nvidia-smi "$NVSMI" --hints "$WORK/hints.env"
  grep -A8 '^inventory:' "$BENCH_LOG" | head -8
  record inventory "$(status_of "$RC")" "$RC" "$t0" "gpu=$HAVE_GPU nvcc=${NVCC:-none} nvidia-smi=${NVSMI:-none}"
fi
CUDNN_ROOT_HINT="" CUDNN_LIBDIR_HINT="" NCCL_ROOT_HINT="" NCCL_LIBDIR_HINT=""
if [[ -f "$WORK/hints.env" ]]; then
  while IFS='=' read -r key value; do
    case "$key" in
      CUDNN_ROOT) CUDNN_ROOT_HINT="$value" ;;
      CUDNN_LIBDIR) CUDNN_LIBDIR_HINT="$value" ;;
      NCCL_ROOT) NCCL_ROOT_HINT="$value" ;;
      NCCL_LIBDIR) NCCL_LIBDIR_HINT="$value" ;;
    esac
  done <"$WORK/hints.env"
fi

# The unpacked dependencies serve the build and every later run of its binaries.
LIBDIR="$PREFIX/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for d in "$CUDNN_LIBDIR_HINT" "$NCCL_LIBDIR_HINT"; do  # last: the toolkit's own copies come first
  [[ -n "$d" && ":$LD_LIBRARY_PATH:" != *":$d:"* ]] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
export OPENCLROOT="$PREFIX/usr"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-8}"
# The device-generic suites include the checked device's own tests (Device*).
export MIXTRAIN_CHECKED_DEVICE=1
export PYTHONUNBUFFERED=1

# --- b. unpack, configure, build -------------------------------------------------------------------
TEST_BIN="$BUILD/tests/mixtrain_tests"
NCCL_BIN="$BUILD/tests/mixtrain_nccl_smoke"
CLI_BIN="$BUILD/tools/mixtrain/mixtrain"
GEMM_BIN=""
find_gemm_bin() {
  GEMM_BIN="$(find "$BUILD" -maxdepth 3 -type f -name '*cuda_gemm_bench' -perm -u+x 2>/dev/null | head -1)"
}
do_build() {
  local t0="$1" debs n=0 args targets=() all
  debs=("$DEBS"/*.deb)
  if [[ -e "${debs[0]}" ]]; then
    # Emptied only where this script owns it: under /tmp or the repository's .gpu-deps.
    if [[ "$PREFIX" == /tmp/?* || "$PREFIX" == "$ROOT/.gpu-deps" ]]; then rm -rf "$PREFIX"; fi
    mkdir -p "$PREFIX"
    for d in "${debs[@]}"; do
      if unpack_deb "$d" "$PREFIX" >>"$BUILD_LOG" 2>&1; then n=$((n + 1)); else echo "failed to unpack $d" >>"$BUILD_LOG"; fi
    done
    echo "unpacked $n of ${#debs[@]} .debs from $DEBS into $PREFIX" | tee -a "$BUILD_LOG"
  else
    echo "no .deb files in $DEBS (scripts/gpu-check-prepare.sh, carry .gpu-debs): relying on system packages" |
      tee -a "$BUILD_LOG"
  fi
  args=(-S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMIXTRAIN_CUDA="$CUDA_MODE"
    -DCMAKE_CUDA_ARCHITECTURES=90 -DMIXTRAIN_MPI=OFF -DMIXTRAIN_BUILD_EXAMPLES=OFF -DMIXTRAIN_BUILD_BENCH=ON
    -DMIXTRAIN_BUILD_CLI=ON -DMIXTRAIN_BUILD_TESTS=ON
    -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DZLIB_ROOT="$PREFIX/usr" -DOPENCLROOT="$PREFIX/usr"
    # Debian's package configs are read by whatever CMake the machine has (pip's may be 4.x).
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
  # Explicit package dirs, so that a copy installed on the system never wins over the prefix.
  local dir
  for pair in "dnnl_DIR=$LIBDIR/cmake/dnnl" "GTest_DIR=$LIBDIR/cmake/GTest" "benchmark_DIR=$LIBDIR/cmake/benchmark" \
    "nlohmann_json_DIR=$PREFIX/usr/share/cmake/nlohmann_json" "CLI11_DIR=$PREFIX/usr/share/cmake/CLI11"; do
    dir="${pair#*=}"
    [[ -d "$dir" ]] && args+=("-D$pair")
  done
  [[ -f "$PREFIX/usr/include/zlib.h" ]] && args+=(-DZLIB_INCLUDE_DIR="$PREFIX/usr/include")
  [[ -e "$LIBDIR/libz.so" ]] && args+=(-DZLIB_LIBRARY="$LIBDIR/libz.so")
  if [[ "$CUDA_MODE" != OFF && -n "$NVCC" ]]; then args+=(-DCMAKE_CUDA_COMPILER="$NVCC"); fi
  [[ -n "$CUDNN_ROOT_HINT" ]] && args+=(-DCUDNN_ROOT="$CUDNN_ROOT_HINT")
  [[ -n "$NCCL_ROOT_HINT" ]] && args+=(-DNCCL_ROOT="$NCCL_ROOT_HINT")
  say "configuring in $BUILD"
  run_to "$(cap_s 90)" "$BUILD_LOG" cmake "${args[@]}"
  if ((RC != 0)); then
    record build "$(status_of "$RC")" "$RC" "$t0" "configure failed: $(grep -m1 -E 'CMake Error|Could not find' "$BUILD_LOG")"
    return
  fi
  grep -E '^-- (mixtrain|Found )' "$BUILD_LOG" | sed 's/^/  /' | head -20
  if [[ "$CONFIGURE_ONLY" == 1 ]]; then
    record build ok 0 "$t0" "configured only (MT_GPU_CHECK_CONFIGURE_ONLY=1), MIXTRAIN_CUDA=$CUDA_MODE"
    return
  fi
  all="$(cmake --build "$BUILD" --target help 2>/dev/null | sed -n 's/^\([A-Za-z0-9_.+-]*\): .*/\1/p')"
  for t in mixtrain_tests mixtrain_nccl_smoke mixtrain_cli; do
    ((QUICK)) && [[ "$t" == mixtrain_cli ]] && continue
    grep -qx "$t" <<<"$all" && targets+=("$t")
  done
  ((QUICK)) || while read -r t; do [[ -n "$t" ]] && targets+=("$t"); done < <(grep -E '(^|_)cuda_gemm_bench$' <<<"$all")
  ((${#targets[@]})) || targets=(all)
  say "building ${targets[*]} with $JOBS jobs"
  local tb
  tb="$(now_ms)"
  # -k 0: a target that fails to compile does not stop the others (the tests can run without the CLI).
  run_to "$(cap_res "$BUILD_CAP" "$RESERVE_TORCH")" "$BUILD_LOG" cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" -- -k 0
  find_gemm_bin
  record build "$(status_of "$RC")" "$RC" "$t0" "built ${targets[*]} in $(since_s "$tb")s; $(grep -c '^FAILED: ' "$BUILD_LOG") failed edges"
}
if want build; then
  t0="$(now_ms)"
  if [[ "$SKIP_BUILD" == 1 ]]; then
    find_gemm_bin
    record build skipped 0 "$t0" "MT_GPU_CHECK_SKIP_BUILD=1"
  elif ((!HAVE_GPU)) && [[ "$CONFIGURE_ONLY" != 1 ]]; then
    record build no-gpu 0 "$t0" "no GPU: nothing built (MT_GPU_CHECK_CONFIGURE_ONLY=1 configures anyway)"
  elif (($(left_s) < 30)); then
    record build skipped 0 "$t0" "budget spent"
  else
    do_build "$t0"
  fi
else
  find_gemm_bin
fi

# --- c. tests ----------------------------------------------------------------------------------------
if want tests; then
  t0="$(now_ms)"
  if ((!HAVE_GPU)); then
    record tests no-gpu 0 "$t0" "no GPU"
  elif [[ ! -x "$TEST_BIN" ]]; then
    record tests skipped 0 "$t0" "no test binary at $TEST_BIN"
  elif (($(left_s) - RESERVE_TORCH < 10)); then
    record tests skipped 0 "$t0" "budget spent"
  else
    phase_cap="$(cap_res 150 "$RESERVE_TORCH")"
    run_to "$(min 75 "$phase_cap")" "$WORK/tests_cuda.log" "$TEST_BIN" \
      --gtest_filter="$CUDA_TESTS_FILTER" --gtest_output="json:$WORK/gtest_cuda.json"
    rc1=$RC
    say "CUDA-vs-CPU tests: rc $rc1"
    run_to "$(min 60 "$((phase_cap - $(since_s "$t0")))")" "$WORK/tests_placement.log" \
      env MIXTRAIN_PLACEMENT_DEVICE=cuda "$TEST_BIN" --gtest_filter='*Placement*' \
      --gtest_output="json:$WORK/gtest_placement.json"
    rc2=$RC
    say "placement on cuda: rc $rc2"
    checked="$("$PY" bench/gpu/gpu_summary.py checked-filter --cuda tests/CMakeLists.txt 2>>"$TESTS_LOG")" ||
      checked='Tensor.*:Matmul.*:Elementwise*:LayerNorm.*:Softmax.*:CrossEntropy.*:Embedding.*:Attention.*:GradScaler*:Adam.*'
    run_to "$((phase_cap - $(since_s "$t0")))" "$WORK/tests_checked.log" env MIXTRAIN_TEST_DEVICE=cuda \
      "$TEST_BIN" --gtest_filter="$checked" --gtest_output="json:$WORK/gtest_checked.json"
    rc3=$RC
    for f in tests_cuda tests_placement tests_checked; do
      printf '\n===== %s =====\n' "$f" >>"$TESTS_LOG"
      cat "$WORK/$f.log" >>"$TESTS_LOG"
    done
    if ((rc1 == 0 && rc2 == 0 && rc3 == 0)); then st=ok; elif [[ "$rc1 $rc2 $rc3" =~ (124|137) ]]; then st=timeout; else st=fail; fi
    worst=$rc1
    ((worst == 0)) && worst=$rc2
    ((worst == 0)) && worst=$rc3
    record tests "$st" "$worst" "$t0" "Cuda*:CachingAllocator* rc $rc1; placement on cuda rc $rc2; device-generic suites on cuda rc $rc3"
  fi
fi

# --- c2. NCCL in a world of one GPU --------------------------------------------------------------------
# DDP's device path (docs/distributed.md, "Models on a device"): built only when configuring found NCCL.
if want nccl; then
  t0="$(now_ms)"
  if ((!HAVE_GPU)); then
    record nccl no-gpu 0 "$t0" "no GPU"
  elif [[ ! -x "$NCCL_BIN" ]]; then
    record nccl skipped 0 "$t0" "no $NCCL_BIN: $(grep -m1 -o 'mixtrain: NCCL OFF.*' "$BUILD_LOG" || echo 'not built')"
  elif (($(left_s) - RESERVE_TORCH < 10)); then
    record nccl skipped 0 "$t0" "budget spent"
  else
    run_to "$(min 60 "$(cap_res 60 "$RESERVE_TORCH")")" "$WORK/tests_nccl.log" env NCCL_DEBUG="${NCCL_DEBUG:-WARN}" \
      "$NCCL_BIN" --gtest_output="json:$WORK/gtest_nccl.json"
    {
      printf '\n===== tests_nccl =====\n'
      cat "$WORK/tests_nccl.log"
    } >>"$TESTS_LOG"
    record nccl "$(status_of "$RC")" "$RC" "$t0" "mixtrain_nccl_smoke rc $RC"
  fi
fi

# --- c3. the CUDA tests under compute-sanitizer ---------------------------------------------------------
SAN_EXIT=86 # compute-sanitizer's exit status when the program succeeded but the tool reported errors
SAN_MIN=15  # a tool is started only with this many seconds left for it
# Mixtrain's kernels all lie in mixtrain::kernels::cuda: this substring of their mangled names keeps
# racecheck and synccheck off the libraries' kernels (cuBLASLt, cuDNN), which are not ours to mend.
SAN_OWN_KERNELS='kns=8mixtrain7kernels4cuda'
SANITIZER="" SANITIZER_VERSION="" SANITIZER_WHY=""
# find_sanitizer: the first compute-sanitizer that runs (--version needs no GPU): MT_COMPUTE_SANITIZER
# alone when set; else the toolkit's own next to nvcc (its version matches the driver's CUDA), the one
# on PATH, then the copy that scripts/gpu-check-prepare.sh staged in .gpu-debs/compute-sanitizer/.
find_sanitizer() {
  local c out root cands=()
  if [[ -n "${MT_COMPUTE_SANITIZER:-}" ]]; then
    cands=("$MT_COMPUTE_SANITIZER")
  else
    if [[ -n "$NVCC" ]]; then
      root="$(dirname "$(dirname "$(readlink -f "$NVCC")")")"
      cands+=("$root/compute-sanitizer/compute-sanitizer" "$root/bin/compute-sanitizer")
    fi
    cands+=("$(command -v compute-sanitizer 2>/dev/null)" "$DEBS/compute-sanitizer/compute-sanitizer")
  fi
  SANITIZER_WHY=""
  for c in "${cands[@]}"; do
    [[ -n "$c" ]] || continue
    if [[ ! -x "$c" ]]; then
      SANITIZER_WHY+="${SANITIZER_WHY:+, }$c absent"
      continue
    fi
    if out="$(timeout 30 "$c" --version 2>&1)"; then
      SANITIZER="$c"
      SANITIZER_VERSION="$(grep -m1 -o 'Version [0-9][0-9.]*' <<<"$out" | cut -d' ' -f2)"
      return 0
    fi
    SANITIZER_WHY+="${SANITIZER_WHY:+, }$c does not run ($(tail -1 <<<"$out"))"
  done
  SANITIZER_WHY="no compute-sanitizer that runs (scripts/gpu-check-prepare.sh stages one; carry .gpu-debs): $SANITIZER_WHY"
  return 1
}
# sanitizer_stage: one run of mixtrain_tests per tool of MT_SANITIZER_TOOLS, each recorded as its own
# phase (memcheck, racecheck, synccheck): ok only when the run exits 0 and the tool's summary line says 0.
sanitizer_stage() {
  local deadline mark_of="" tool t0 cap own filter log summary first st note extra=() args=()
  deadline="$BUDGET"
  if ((QUICK && QUICK_LIMIT < deadline)); then
    deadline="$QUICK_LIMIT"
    mark_of=" (--quick's limit)"
  fi
  read -r -a extra <<<"${MT_SANITIZER_ARGS:-}"
  find_sanitizer
  for tool in memcheck racecheck synccheck; do
    [[ ",$SAN_TOOLS," == *",$tool,"* ]] || continue
    t0="$(now_ms)"
    if [[ -z "$SANITIZER" ]]; then
      record "$tool" fail 127 "$t0" "$SANITIZER_WHY"
      continue
    elif ((!HAVE_GPU)); then
      record "$tool" no-gpu 0 "$t0" "no GPU (compute-sanitizer $SANITIZER_VERSION at $SANITIZER)"
      continue
    elif [[ ! -x "$TEST_BIN" ]]; then
      record "$tool" skipped 0 "$t0" "no test binary at $TEST_BIN"
      continue
    fi
    case "$tool" in
      memcheck)
        own=60
        filter="$SAN_MEMCHECK_FILTER"
        args=(--leak-check no)
        ;;
      *)
        own=30
        filter="$SAN_SHARED_FILTER"
        args=(--kernel-name "$SAN_OWN_KERNELS")
        ;;
    esac
    cap=$((deadline - $(elapsed_s)))
    ((cap > own)) && cap="$own"
    if ((cap < SAN_MIN)); then
      record "$tool" skipped 0 "$t0" "budget spent: ${cap}s left before the ${deadline}s mark${mark_of}"
      continue
    fi
    log="$WORK/san_$tool.log"
    : >"$log"
    run_to "$cap" "$log" "$SANITIZER" --tool "$tool" --error-exitcode "$SAN_EXIT" --print-limit 100 "${args[@]}" \
      "${extra[@]}" "$TEST_BIN" --gtest_filter="$filter" --gtest_output="json:$WORK/gtest_san_$tool.json"
    summary="$(grep -E '^=+ (ERROR|RACECHECK) SUMMARY: ' "$log" | sed 's/^=* //' | tail -2 | paste -sd ';' -)"
    # The first message of the tool: a report, or an error of the tool itself ("Device not supported").
    first="$(grep -E '^=+ [^ ]' "$log" | sed 's/^=* //' | grep -vE '^(COMPUTE-SANITIZER|(ERROR|RACECHECK) SUMMARY)' | head -1)"
    if ((RC == 0)) && [[ -n "$summary" ]] && ! grep -qE '(ERROR|RACECHECK) SUMMARY: [1-9]' <<<"$summary"; then
      st=ok
    elif ((RC == 124 || RC == 137)); then
      st=timeout
    else
      st=fail
    fi
    {
      printf '\n===== %s: compute-sanitizer %s (%s) =====\n' "$tool" "$SANITIZER_VERSION" "$SANITIZER"
      cat "$log"
    } >>"$TESTS_LOG"
    note="rc $RC"
    ((RC == SAN_EXIT)) && note="rc $RC: the tool reported errors"
    record "$tool" "$st" "$RC" "$t0" "$note; ${summary:-no summary line}${first:+; first: $first}; compute-sanitizer $SANITIZER_VERSION ($SANITIZER)"
  done
}
if want sanitizer && ((QUICK)); then sanitizer_stage; fi

# --- d. GEMM microbenchmarks -------------------------------------------------------------------------
if want gemm; then
  t0="$(now_ms)"
  if ((!HAVE_GPU)); then
    record gemm no-gpu 0 "$t0" "no GPU"
  elif (($(left_s) - RESERVE_TORCH < 10)); then
    record gemm skipped 0 "$t0" "budget spent"
  else
    phase_cap="$(cap_res 45 "$RESERVE_TORCH")"
    note="" rc1=0
    if [[ -n "$GEMM_BIN" ]]; then
      run_split "$(min 25 "$phase_cap")" "$WORK/mixtrain_gemm.out" "$BENCH_LOG" "$GEMM_BIN" --json
      rc1=$RC
      note="cuda_gemm_bench rc $rc1"
    else
      note="no cuda_gemm_bench binary in $BUILD"
    fi
    run_split "$((phase_cap - $(since_s "$t0")))" "$WORK/torch_gemm.out" "$BENCH_LOG" \
      "$PY" bench/gpu/torch_gemm.py --device cuda --tokens "$GEMM_TOKENS"
    rc2=$RC
    record gemm "$(status_of "$((rc1 != 0 ? rc1 : rc2))")" "$((rc1 != 0 ? rc1 : rc2))" "$t0" "$note; torch_gemm.py rc $rc2"
  fi
fi

# --- e. GPT-small through mixtrain -------------------------------------------------------------------
if want mixtrain; then
  t0="$(now_ms)"
  if ((!HAVE_GPU)); then
    record mixtrain_gpt no-gpu 0 "$t0" "no GPU"
  elif [[ ! -x "$CLI_BIN" ]]; then
    record mixtrain_gpt skipped 0 "$t0" "no mixtrain binary at $CLI_BIN"
  elif (($(left_s) - RESERVE_TORCH < 15)); then
    record mixtrain_gpt skipped 0 "$t0" "budget spent"
  else
    phase_cap="$(cap_res 105 "$RESERVE_TORCH")"
    worst=0 notes=()
    for p in fp32 bf16 fp16; do
      : >"$WORK/mixtrain_gpt_$p.err"
      run_split "$(min 45 "$((phase_cap - $(since_s "$t0")))")" "$WORK/mixtrain_gpt_$p.out" "$WORK/mixtrain_gpt_$p.err" \
        "$CLI_BIN" bench --device cuda --model gpt-small --precision "$p" --batch-size "$BATCH" \
        --steps 10 --warmup 3 --json
      ((RC != 0 && worst == 0)) && worst=$RC
      notes+=("$p rc $RC")
      {
        printf '\n===== mixtrain bench %s =====\n' "$p"
        cat "$WORK/mixtrain_gpt_$p.err"
        cat "$WORK/mixtrain_gpt_$p.out"
      } >>"$BENCH_LOG"
    done
    record mixtrain_gpt "$(status_of "$worst")" "$worst" "$t0" "batch $BATCH: ${notes[*]}"
  fi
fi

# --- f. PyTorch baselines ----------------------------------------------------------------------------
if want torch; then
  t0="$(now_ms)"
  if ((!HAVE_GPU)); then
    record torch_eager no-gpu 0 "$t0" "no GPU"
  elif (($(left_s) < 15)); then
    record torch_eager skipped 0 "$t0" "budget spent"
  else
    run_split "$(cap_s 100)" "$WORK/torch_eager.out" "$BENCH_LOG" "$PY" bench/gpu/torch_gpt.py --device cuda \
      --precision fp32,bf16,fp16 --batch-size "$BATCH" --steps 10 --warmup 3
    record torch_eager "$(runs_status "$RC" "$WORK/torch_eager.out")" "$RC" "$t0" \
      "batch $BATCH; $(grep -c '"status": "ok"' "$WORK/torch_eager.out") runs ok"
  fi
fi
# In the full check the sanitizer runs here: after the issue's targets, before torch_compile.
if want sanitizer && ((!QUICK)); then sanitizer_stage; fi
if want compile; then
  t0="$(now_ms)"
  if ((!HAVE_GPU)); then
    record torch_compile no-gpu 0 "$t0" "no GPU"
  elif (($(left_s) < 60)); then
    record torch_compile skipped 0 "$t0" "budget: $(left_s)s left, a first compile takes about a minute"
  else
    t="$(cap_s 170)"
    n_prec="$(tr ',' '\n' <<<"$COMPILE_PRECISIONS" | grep -c .)"
    run_split "$t" "$WORK/torch_compile.out" "$BENCH_LOG" \
      env TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-/tmp/mt-inductor-cache}" \
      "$PY" bench/gpu/torch_gpt.py --device cuda --compile \
      --compile-timeout "$(((t - 10) / n_prec))" --precision "$COMPILE_PRECISIONS" --batch-size "$BATCH" \
      --steps 10 --warmup 3
    record torch_compile "$(runs_status "$RC" "$WORK/torch_compile.out")" "$RC" "$t0" \
      "$COMPILE_PRECISIONS; $(grep -c '"status": "ok"' "$WORK/torch_compile.out") runs ok"
  fi
fi

# --- g. summary --------------------------------------------------------------------------------------
say "phases done in $(elapsed_s)s; summarizing"
trim_log "$BUILD_LOG"
trim_log "$TESTS_LOG"
if ! timeout 60 "$PY" bench/gpu/gpu_summary.py summary --work "$WORK" --out "$OUT" --budget "$BUDGET" 2>&1 |
  tee -a "$BENCH_LOG"; then
  echo "gpu_summary.py failed; the raw phase records:"
  cat "$WORK/phases.tsv"
fi
trim_log "$BENCH_LOG"

echo
echo "outputs ($(find "$OUT" -maxdepth 1 -type f | wc -l) files in $OUT; raw outputs in $WORK, build in $BUILD):"
for f in summary.json env.json build.log tests.log tests.json bench.log bench.json torch.json; do
  [[ -f "$OUT/$f" ]] && printf '  %-13s %9s bytes\n' "$f" "$(stat -c %s "$OUT/$f")"
done
say "total $(elapsed_s)s"
if awk -F'\t' '$2 != "ok" && $2 != "no-gpu" && $2 != "skipped" {bad = 1} END {exit bad}' "$WORK/phases.tsv"; then
  exit 0
fi
exit 1
