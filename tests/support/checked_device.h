// The test suite's view of the checked device (mixtrain/device.h, kChecked; docs/notes/backends.md):
// host memory behind pointers the host cannot dereference, the CPU's kernels behind a guard that
// refuses tensors from other devices, and counted host waits.
//
// Two ways the suite runs on it:
//   - MIXTRAIN_TEST_DEVICE=checked makes it the default device of the test binary
//     (tests/CMakeLists.txt registers the device-generic op suites a second time that way, "checked:"),
//     so that every tensor of those tests lives on it: a front-end line that reads tensor memory
//     directly crashes its test.
//   - The placement tests (tests/train/test_placement.cpp, tests/cli/placement.cmake) leave the
//     default device on the CPU and move models with .to(checked_device()), as a user's program does:
//     a tensor created without a device lands on the CPU and the guard refuses it.
// The test binary needs MIXTRAIN_CHECKED_DEVICE=1 in its environment (CTest sets it;
// MIXTRAIN_TEST_DEVICE=checked sets it too).
#pragma once

#include "mixtrain/device.h"

namespace mixtrain::testing {

// The checked device; throws a clear error when MIXTRAIN_CHECKED_DEVICE=1 is not set.
Device checked_device();

// The device tensors are made on in this run: checked_device() under MIXTRAIN_TEST_DEVICE=checked,
// cuda:0 under MIXTRAIN_TEST_DEVICE=cuda (scripts/gpu-check.sh runs the suite so), else the CPU.
Device test_device();

}  // namespace mixtrain::testing
