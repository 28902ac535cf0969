#!/usr/bin/env bash
# The CUDA backend executed on the host (docs/cuda.md, "CUDA on the host"): builds the library with
# -DMIXTRAIN_CUDA=HOST in build-cuda-host/ (its .cu files compiled as C++ against src/backends/cuda/host)
# and runs the CUDA-vs-CPU tests on it under two thread schedules, in order and seeded random, so that
# a missing barrier changes results or trips the checker. No toolkit or GPU is needed.
#
#   scripts/test-cuda-host.sh          # the CUDA suites, three slow attention cases left out (~3 min)
#   scripts/test-cuda-host.sh --full   # every CUDA test (the fp32 attention cases take minutes each)
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

full=0
for arg in "$@"; do
  case "$arg" in
    --full) full=1 ;;
    *) mt_die "unknown argument '$arg' (scripts/test-cuda-host.sh [--full])" ;;
  esac
done

MT_BUILD_DIR="${MT_CUDA_HOST_BUILD_DIR:-$MT_ROOT/build-cuda-host}"
MT_CMAKE_OPTIONS=(-DMIXTRAIN_CUDA=HOST -DMIXTRAIN_BUILD_TESTS=ON -DMIXTRAIN_BUILD_CLI=ON -DMIXTRAIN_BUILD_EXAMPLES=OFF
  -DMIXTRAIN_BUILD_BENCH=OFF)
mt_install_packages "$MT_ROOT/scripts/packages.txt"
mt_build mixtrain_tests mixtrain_cli

filter='Cuda*:*Cuda*'
if ((!full)); then
  # The fp32 (non-tensor-core) attention kernels reduce with a warp shuffle per key: on the host each
  # of these cases takes minutes. The flash (WMMA) path and the packed/sdpa ops stay in.
  filter+=':-CudaAttention.SelfAttentionOnAPackedProjectionMatchesTheCpu'
  filter+=':CudaAttention.CrossAttentionWithMoreOrFewerKeysMatchesTheCpu'
  filter+=':CudaAttention.UnalignedRowsAndOtherScalesMatchTheCpu'
fi
failed=()
for schedule in in-order random:1; do
  mt_heading "CUDA tests on the host (MIXTRAIN_CUDA_HOST_SCHEDULE=$schedule)"
  MIXTRAIN_CUDA_HOST_SCHEDULE="$schedule" "$MT_BUILD_DIR/tests/mixtrain_tests" --gtest_filter="$filter" \
    --gtest_brief=1 || failed+=("$schedule")
done
if ((${#failed[@]})); then
  mt_die "CUDA tests on the host failed under the schedule(s): ${failed[*]}"
fi
echo "CUDA tests on the host passed under: in-order random:1"
