#!/usr/bin/env bash
# Builds mixtrain (Release, build/) and runs every test through CTest. Installs missing Debian
# packages first (as root, or through sudo). Exits non-zero on any failure.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# Every part, whatever an existing build/ has cached.
MT_CMAKE_OPTIONS=(-DMIXTRAIN_BUILD_TESTS=ON -DMIXTRAIN_BUILD_EXAMPLES=ON -DMIXTRAIN_BUILD_BENCH=ON
  -DMIXTRAIN_BUILD_CLI=ON)
mt_install_packages
# shellcheck disable=SC2119 # no targets: build everything
mt_build
mt_heading "Running tests"
ctest --test-dir "$MT_BUILD_DIR" --output-on-failure -j1
