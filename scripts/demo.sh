#!/usr/bin/env bash
# The main job: trains the same model on Fashion-MNIST in fp32, bf16 and fp16 and prints the
# comparison (accuracy, speed, memory). Installs missing Debian packages first (as root, or through
# sudo) and builds Release in build/. Extra arguments go to `mixtrain compare` (see its --help),
# e.g. `scripts/demo.sh --epochs 2`; results are written under runs/compare.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

MT_CMAKE_OPTIONS=(-DMIXTRAIN_BUILD_CLI=ON -DMIXTRAIN_BUILD_EXAMPLES=ON)
mt_install_packages
cd "$MT_ROOT"
if [[ -f tools/mixtrain/CMakeLists.txt ]]; then
  mt_build mixtrain_cli
  mt_heading "Training Fashion-MNIST in fp32, bf16 and fp16 (mixtrain compare)"
  "$MT_BUILD_DIR/tools/mixtrain/mixtrain" compare "$@"
else
  # Without the CLI in the tree, the example program does the same by hand (arguments: data
  # directory, epochs).
  mt_build mixtrain_example_fashion_mnist_mlp
  mt_heading "Training Fashion-MNIST in fp32, bf16 and fp16 (examples/fashion_mnist_mlp.cpp)"
  "$MT_BUILD_DIR/examples/mixtrain_example_fashion_mnist_mlp" "$@"
fi
