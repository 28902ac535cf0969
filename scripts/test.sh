#!/usr/bin/env bash
# Builds mixtrain (Release, build/) and runs every test through CTest, once at the CPU's own
# instruction-set level and once under each lower MIXTRAIN_MAX_ISA cap, so that every dispatch path
# this CPU can run is tested. The avx2 cap (the level of most laptops and CI runners) always runs,
# also where it is the CPU's own level. MT_TEST_CAPS="a b" runs only those caps after the native run.
# Installs missing Debian packages first (as root, or through sudo). Exits non-zero on any failure.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# Every part, whatever an existing build/ has cached.
MT_CMAKE_OPTIONS=(-DMIXTRAIN_BUILD_TESTS=ON -DMIXTRAIN_BUILD_EXAMPLES=ON -DMIXTRAIN_BUILD_BENCH=ON
  -DMIXTRAIN_BUILD_CLI=ON)
mt_install_packages
# shellcheck disable=SC2119 # no targets: build everything
mt_build
lower="$(mt_isa_caps_below_native)"
[[ " $lower " == *" avx2 "* ]] || lower="avx2 $lower"
read -r -a caps <<<"${MT_TEST_CAPS-$lower}"
failed=()
for cap in native "${caps[@]}"; do
  mt_heading "Running tests (MIXTRAIN_MAX_ISA=$cap)"
  MIXTRAIN_MAX_ISA="$cap" ctest --test-dir "$MT_BUILD_DIR" --output-on-failure -j1 || failed+=("$cap")
done
if ((${#failed[@]})); then
  mt_die "tests failed under MIXTRAIN_MAX_ISA=${failed[*]}"
fi
echo "all tests passed at: native ${caps[*]}"
