// The host-staged test collectives of the checked device (support/host_staged_collectives.h).
#include "support/host_staged_collectives.h"

#include <gtest/gtest.h>

#include "mixtrain/mixtrain.h"

namespace mixtrain::testing {
namespace {

// Each collective copies the tensor to the host, runs the process group's collective there and
// copies the result back: the arithmetic of the host-staged paths, reached through the device path.
class HostStagedCommunicator final : public DeviceCommunicator {
 public:
  HostStagedCommunicator(HostStagedCollectives& owner, int rank, int size, Device device)
      : DeviceCommunicator(rank, size, device), owner_(&owner) {}

 protected:
  void all_reduce_impl(const Tensor& t, DeviceReduceOp op) override {
    record("all_reduce " + std::string(to_string(op)), t);
    NoGradGuard no_grad;
    const Tensor host = t.detach().to(kCPU);
    owner_->group->all_reduce(host, op == DeviceReduceOp::kSum ? dist::ReduceOp::kSum : dist::ReduceOp::kAvg);
    t.detach().copy_(host);
  }
  void broadcast_impl(const Tensor& t, int root) override {
    record("broadcast", t);
    NoGradGuard no_grad;
    const Tensor host = t.detach().to(kCPU);
    owner_->group->broadcast(host, root);
    t.detach().copy_(host);
  }
  void all_gather_impl(const Tensor& input, const Tensor& output) override {
    record("all_gather", input);
    NoGradGuard no_grad;
    const Tensor in = input.detach().to(kCPU);
    const Tensor out = empty({output.numel()}, {.dtype = output.dtype(), .device = kCPU});
    owner_->group->all_gather(in, out);
    output.detach().view({-1}).copy_(out);
  }

 private:
  void record(std::string kind, const Tensor& t) {
    owner_->events.push_back({std::move(kind), t.numel(), autograd::in_backward(), t.dtype()});
  }
  HostStagedCollectives* owner_;
};

}  // namespace

std::vector<uint8_t> host_staged_id() {
  std::vector<uint8_t> id(40);
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(0xA5 ^ (i * 37 + 11));
  return id;
}

std::vector<uint8_t> HostStagedCollectives::create_unique_id() {
  ++ids_made;
  return host_staged_id();
}

std::vector<CollectiveEvent> HostStagedCollectives::of_kind(const std::string& kind) const {
  std::vector<CollectiveEvent> out;
  for (const CollectiveEvent& e : events)
    if (e.kind == kind) out.push_back(e);
  return out;
}

std::unique_ptr<DeviceCommunicator> HostStagedCollectives::connect_impl(std::span<const uint8_t> id, int rank, int size,
                                                                        Device device) {
  EXPECT_EQ(rank, group->rank());
  EXPECT_EQ(size, group->size());
  connected_ids.emplace_back(id.begin(), id.end());
  events.push_back({"connect", size, autograd::in_backward()});
  return std::make_unique<HostStagedCommunicator>(*this, rank, size, device);
}

}  // namespace mixtrain::testing
