// Device collectives for the checked device without a GPU (core/device_collectives.h): a communicator
// that stages each tensor through the host and runs the process group's collective there (what NCCL
// does in device memory), recording every call. Registered by the tests of the device paths:
// DistributedDataParallel's gradient buckets (tests/dist/test_ddp_device.cpp) and ZeRO-1's parameter
// all-gather (tests/dist/test_zero.cpp, ZeroDevice*), under `mpirun -np 2` / `-np 3` (CTest's mpi:ddp,
// mpi:zero_2, mpi:zero_3).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/device_collectives.h"
#include "mixtrain/dist/process_group.h"

namespace mixtrain::testing {

struct CollectiveEvent {
  std::string kind;   // "connect", "broadcast", "all_reduce sum", "all_reduce avg", "all_gather"
  int64_t numel = 0;  // connect: the size; all_gather: the input's elements
  bool in_backward = false;
  DType dtype = kFloat32;
};

// The id rank 0 makes: 40 bytes no other rank could guess by chance (NCCL's are 128 random bytes).
std::vector<uint8_t> host_staged_id();

class HostStagedCollectives final : public DeviceCollectives {
 public:
  explicit HostStagedCollectives(dist::ProcessGroup& g) : group(&g) {}
  std::string name() const override { return "host-staged (test)"; }
  std::vector<uint8_t> create_unique_id() override;

  // The events of one kind, in order.
  std::vector<CollectiveEvent> of_kind(const std::string& kind) const;
  void clear() {
    ids_made = 0;
    connected_ids.clear();
    events.clear();
  }

  dist::ProcessGroup* group;
  int ids_made = 0;
  std::vector<std::vector<uint8_t>> connected_ids;
  std::vector<CollectiveEvent> events;

 protected:
  std::unique_ptr<DeviceCommunicator> connect_impl(std::span<const uint8_t> id, int rank, int size,
                                                   Device device) override;
};

// Registers collectives for the checked device for the scope of a test.
struct RegisteredForChecked {
  explicit RegisteredForChecked(DeviceCollectives* c) { register_device_collectives(kChecked, c); }
  ~RegisteredForChecked() { register_device_collectives(kChecked, nullptr); }
  RegisteredForChecked(const RegisteredForChecked&) = delete;
  RegisteredForChecked& operator=(const RegisteredForChecked&) = delete;
};

}  // namespace mixtrain::testing
