#!/usr/bin/env bash
# The CUDA backend executed on the host (docs/cuda.md, "CUDA on the host"), in the AddressSanitizer +
# UndefinedBehaviorSanitizer build that scripts/test.sh --sanitize uses (build-asan/, configured with
# -DMIXTRAIN_CUDA=HOST: the backend's .cu files compiled as C++ against src/backends/cuda/host). Runs,
# under each thread schedule given, so that a missing barrier changes results or trips the checker:
#   - the CUDA-vs-CPU suites (Cuda*),
# and, in a Release host build (build-cuda-host/, which shares every object but the CUDA backend's
# with build/ through ccache; whole models train there in seconds where ASan takes minutes):
#   - the placement suites on the CUDA device (MIXTRAIN_PLACEMENT_DEVICE=cuda),
#   - the CLI's --device cuda runs of every model against --device cpu, bench's host waits on cuda,
#     DDP and ZeRO-1 with --device cuda under mpirun (ctest label cuda_host; sanitizer builds leave MPI
#     out, cmake/Mpi.cmake). The ASan build runs the same CLI tests in its own suite (test.sh --sanitize).
# No toolkit or GPU is needed.
#
#   scripts/test-cuda-host.sh                      # schedules in-order and random:1
#   scripts/test-cuda-host.sh --schedule reverse   # only the schedules named (repeatable)
#   scripts/test-cuda-host.sh --full               # also the three fp32 attention cases (minutes each)
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

full=0
schedules=()
while (($#)); do
  case "$1" in
    --full) full=1 ;;
    --schedule)
      [[ $# -ge 2 && -n "$2" ]] || mt_die "--schedule needs a value: in-order, reverse or random:SEED"
      schedules+=("$2")
      shift
      ;;
    *) mt_die "unknown argument '$1' (scripts/test-cuda-host.sh [--schedule S]... [--full])" ;;
  esac
  shift
done
((${#schedules[@]})) || schedules=(in-order random:1)

mt_install_packages "$MT_ROOT/scripts/packages.txt"
MT_BUILD_DIR="${MT_CUDA_HOST_BUILD_DIR:-$MT_ROOT/build-cuda-host}"
MT_CMAKE_OPTIONS=(-DMIXTRAIN_CUDA=HOST -DMIXTRAIN_BUILD_TESTS=ON -DMIXTRAIN_BUILD_CLI=ON -DMIXTRAIN_BUILD_EXAMPLES=OFF
  -DMIXTRAIN_BUILD_BENCH=OFF)
mt_build mixtrain_tests mixtrain_cli mixtrain_compare_weights
release_dir="$MT_BUILD_DIR"
mt_use_sanitizer_build
mt_build mixtrain_tests mixtrain_cli mixtrain_compare_weights

filter='Cuda*:*Cuda*'
if ((!full)); then
  # The fp32 (non-tensor-core) attention kernels reduce with a warp shuffle per key: on the host each
  # of these cases takes minutes. The flash (WMMA) path and the packed/sdpa ops stay in. (The same
  # three are left out of the host-CUDA build's CTest suite: tests/CMakeLists.txt.)
  filter+=':-CudaAttention.SelfAttentionOnAPackedProjectionMatchesTheCpu'
  filter+=':CudaAttention.CrossAttentionWithMoreOrFewerKeysMatchesTheCpu'
  filter+=':CudaAttention.UnalignedRowsAndOtherScalesMatchTheCpu'
fi
# gpt-small's placement cases (768 wide, 12 heads: its kernels' shapes) take minutes each on the
# host; gpt and gpt2 cover the same kernels at smaller shapes. --full runs them.
placement='*Placement*'
((full)) || placement+=':-*gpt_small*'
failed=()
for schedule in "${schedules[@]}"; do
  export MIXTRAIN_CUDA_HOST_SCHEDULE="$schedule"
  mt_heading "CUDA suites on the host (MIXTRAIN_CUDA_HOST_SCHEDULE=$schedule)"
  "$MT_BUILD_DIR/tests/mixtrain_tests" --gtest_filter="$filter" --gtest_brief=1 || failed+=("$schedule: Cuda suites")
  mt_heading "Placement suites on the CUDA device (MIXTRAIN_PLACEMENT_DEVICE=cuda), Release build ($schedule)"
  MIXTRAIN_PLACEMENT_DEVICE=cuda MIXTRAIN_CHECKED_DEVICE=1 OMP_NUM_THREADS=2 \
    "$release_dir/tests/mixtrain_tests" --gtest_filter="$placement" --gtest_brief=1 || failed+=("$schedule: placement")
  mt_heading "CLI runs, DDP and ZeRO-1 with --device cuda, Release build ($schedule)"
  ctest --test-dir "$release_dir" -L cuda_host --output-on-failure -j1 || failed+=("$schedule: CLI")
done
unset MIXTRAIN_CUDA_HOST_SCHEDULE
if ((${#failed[@]})); then
  mt_die "CUDA on the host failed: ${failed[*]}"
fi
echo "CUDA on the host passed under: ${schedules[*]}"
