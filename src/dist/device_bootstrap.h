// src/dist/device_bootstrap.h (internal): what DistributedDataParallel (its gradient buckets) and
// ZeroRedundancyOptimizer (its parameter all-gather) share to move tensors in device memory through
// the device's collectives (core/device_collectives.h) instead of staging them through the host for
// the ProcessGroup: the choice of path, the check that every rank took the same, and the bootstrap of
// a communicator over the group (docs/distributed.md, "Models on a device").
#pragma once

#include <memory>
#include <string_view>

#include "core/device_collectives.h"
#include "mixtrain/dist/ddp.h"
#include "mixtrain/dist/process_group.h"

namespace mixtrain::dist::detail {

// Who asks, for the messages: "DistributedDataParallel", its option "reduction", and what its
// collectives do, "reduces" (ZeRO-1: "ZeroRedundancyOptimizer", "gather", "gathers").
struct PathUser {
  std::string_view who;
  std::string_view option;
  std::string_view verb;
};

// The path `wanted` allows for tensors on `device` (never kAuto): kProcessGroup as asked; with
// kDeviceCollectives the device's collectives, required (a cpu device, or a device type without
// any, is an mt::Error saying why), whatever the group's size; with kAuto the device collectives
// when the device is not the cpu, its type has some and the group has more than one rank (one rank
// has nothing to exchange: a communicator would only cost its setup), else the process group.
// Then, collectively, every rank's choice is all-gathered and a mix is refused on every rank,
// naming the ranks: two ranks on different paths would issue different collectives and wait for
// each other forever.
ReductionPath agree_on_path(const PathUser& user, ReductionPath wanted, Device device, ProcessGroup& group);

// NCCL's bootstrap over the process group (collective): rank 0 makes the communicator's unique id,
// the group broadcasts its bytes as a uint8 CPU tensor, and every rank connects with its rank and the
// group's size on `device`.
std::unique_ptr<DeviceCommunicator> connect_device_communicator(const PathUser& user, ProcessGroup& group,
                                                                Device device);

}  // namespace mixtrain::dist::detail
