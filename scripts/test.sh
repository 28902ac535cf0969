#!/usr/bin/env bash
# Builds mixtrain (Release, build/) and runs every test through CTest, once at the CPU's own
# instruction-set level and once under each lower MIXTRAIN_MAX_ISA cap, so that every dispatch path
# this CPU can run is tested. The avx2 cap (the level of most laptops and CI runners) always runs,
# also where it is the CPU's own level. MT_TEST_CAPS="a b" runs only those caps after the native run.
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
lower="$(mt_isa_caps_below_native)"
[[ " $lower " == *" avx2 "* ]] || lower="avx2 $lower"
read -r -a caps <<<"${MT_TEST_CAPS-$lower}"
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
