// The checked device: a test-only second device (the kPrivateUse1 slot) whose memory is host memory
// behind pointers the host cannot dereference, and whose kernels are the CPU's.
//
// Its allocator hands out addresses with bit 62 set: non-canonical on x86-64, so any load or store
// through one faults at once. Only the backend's own paths turn them back into host addresses:
// Backend::host_address (what the CPU kernels reach memory through, kernels/cpu/host_ptr.h) and the
// host transfers. An op, autograd, AMP, optimizer or trainer line that reads tensor memory directly
// instead of through a kernel or a copy crashes the test that runs it.
//
// Running the suite on it: MIXTRAIN_TEST_DEVICE=checked makes it the default device of the test
// binary (tests/CMakeLists.txt registers the device-generic tests a second time that way).
#pragma once

#include "mixtrain/device.h"

namespace mixtrain::testing {

// Registers the backend and its kernels (once) and returns the device.
Device checked_device();

// The device tensors are made on in this run: checked_device() under MIXTRAIN_TEST_DEVICE=checked,
// cuda:0 under MIXTRAIN_TEST_DEVICE=cuda (scripts/gpu-check.sh runs the suite so), else the CPU.
Device test_device();

}  // namespace mixtrain::testing
