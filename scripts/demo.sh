#!/usr/bin/env bash
# The main job: trains the same model on Fashion-MNIST in fp32, bf16 and fp16 and prints the
# comparison (accuracy, speed, memory). Installs missing Debian packages first (as root, or through
# sudo) and builds Release in build/. Extra arguments go to `mixtrain compare` (see its --help),
# e.g. `scripts/demo.sh --epochs 5`; results are written under runs/demo (replacing the last demo's).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

MT_CMAKE_OPTIONS=(-DMIXTRAIN_BUILD_CLI=ON -DMIXTRAIN_BUILD_EXAMPLES=ON)
mt_install_packages "$MT_ROOT/scripts/packages.txt"
cd "$MT_ROOT"
mt_build mixtrain_cli
mt_heading "Training a CNN on Fashion-MNIST in fp32, bf16 and fp16 (mixtrain compare)"
# A flag given twice keeps its last value, so `scripts/demo.sh --epochs 5` overrides the 2 here.
"$MT_BUILD_DIR/tools/mixtrain/mixtrain" compare --model cnn --data fashion-mnist --epochs 2 \
  --precisions fp32,bf16,fp16 --out runs/demo --overwrite "$@"
