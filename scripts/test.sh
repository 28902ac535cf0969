#!/usr/bin/env bash
# Builds mixtrain (Release, build/) and runs every test through CTest, once at the CPU's own
# instruction-set level and once under each lower MIXTRAIN_MAX_ISA cap, so that every dispatch path
# this CPU can run is tested (on an AVX-512 CPU: avx512, avx2 and generic after native; on an AVX2
# CPU: generic, since the native run is the avx2 level). MT_TEST_CAPS="a b" runs only those caps
# after the native run.
# Installs missing Debian packages first (as root, or through sudo). Exits non-zero on any failure.
#
#   scripts/test.sh              # Release build in build/, the suite at every ISA cap
#   scripts/test.sh --sanitize   # AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/,
#                                # the suite once at the native level (every report fails its test),
#                                # with the CUDA backend executed on the host (-DMIXTRAIN_CUDA=HOST:
#                                # its kernels, its runtime calls and the CUDA tests under both
#                                # sanitizers; scripts/test-cuda-host.sh adds the other schedules)
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

sanitize=0
for arg in "$@"; do
  case "$arg" in
    --sanitize) sanitize=1 ;;
    *) mt_die "unknown argument '$arg' (scripts/test.sh [--sanitize])" ;;
  esac
done

# Every part, whatever an existing build/ has cached.
MT_CMAKE_OPTIONS=(-DMIXTRAIN_BUILD_TESTS=ON -DMIXTRAIN_BUILD_EXAMPLES=ON -DMIXTRAIN_BUILD_BENCH=ON
  -DMIXTRAIN_BUILD_CLI=ON)
if ((sanitize)); then
  mt_use_sanitizer_build
  MT_TEST_CAPS="${MT_TEST_CAPS-}"
fi
mt_install_packages "$MT_ROOT/scripts/packages.txt"
# shellcheck disable=SC2119 # no targets: build everything
mt_build
# Every level below the CPU's own. A cap at the CPU's own level would repeat the native run: the
# dispatch resolves to the same kernels (the cap's parsing has its own tests).
read -r -a caps <<<"${MT_TEST_CAPS-$(mt_isa_caps_below_native)}"
failed=()
for cap in native "${caps[@]}"; do
  mt_heading "Running tests (MIXTRAIN_MAX_ISA=$cap)"
  # Tests labelled isa_independent compare devices that run the same kernels: once is enough.
  once=()
  [[ "$cap" == native ]] || once=(-LE isa_independent)
  # Whole-model runs on the host-executed CUDA device that take minutes under ASan run in the Release
  # host build instead (scripts/test-cuda-host.sh).
  ((sanitize)) && once=(-LE slow_under_asan)
  MIXTRAIN_MAX_ISA="$cap" ctest --test-dir "$MT_BUILD_DIR" --output-on-failure -j1 "${once[@]}" || failed+=("$cap")
done
if ((${#failed[@]})); then
  mt_die "tests failed under MIXTRAIN_MAX_ISA=${failed[*]}"
fi
echo "all tests passed at: native ${caps[*]}"
