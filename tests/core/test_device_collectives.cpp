// The device-collectives registry (core/device_collectives.h): lookups of a device type with none,
// CUDA's built-in NCCL where this build has it (else the reason), registration and removal, and the
// argument checks every backend's communicator shares (device, layout, dtype, op, root, rank, and
// all_gather's sizes and overlap).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/device_collectives.h"
#include "mixtrain/mixtrain.h"
#include "support/checked_device.h"
#include "support/expect_error.h"

namespace mt = mixtrain;

namespace {

// A communicator that records what reaches the backend (after the shared checks) and does nothing.
class RecordingCommunicator final : public mt::DeviceCommunicator {
 public:
  RecordingCommunicator(int rank, int size, mt::Device device, std::vector<std::string>* log)
      : DeviceCommunicator(rank, size, device), log_(log) {}

 protected:
  void all_reduce_impl(const mt::Tensor& t, mt::DeviceReduceOp op) override {
    log_->push_back("all_reduce " + std::string(mt::to_string(op)) + " " + std::to_string(t.numel()));
  }
  void broadcast_impl(const mt::Tensor& t, int root) override {
    log_->push_back("broadcast " + std::to_string(root) + " " + std::to_string(t.numel()));
  }
  void all_gather_impl(const mt::Tensor& input, const mt::Tensor& output) override {
    log_->push_back("all_gather " + std::to_string(input.numel()) + " " + std::to_string(output.numel()));
  }

 private:
  std::vector<std::string>* log_;
};

class RecordingCollectives final : public mt::DeviceCollectives {
 public:
  std::string name() const override { return "recording"; }
  std::vector<uint8_t> create_unique_id() override { return {1, 2, 3}; }
  std::vector<std::string> log;

 protected:
  std::unique_ptr<mt::DeviceCommunicator> connect_impl(std::span<const uint8_t> id, int rank, int size,
                                                       mt::Device device) override {
    log.push_back("connect " + std::to_string(id.size()) + " " + std::to_string(rank) + "/" + std::to_string(size));
    return std::make_unique<RecordingCommunicator>(rank, size, device, &log);
  }
};

// Registers for the scope of a test, then removes the registration.
struct Registered {
  Registered(mt::DeviceType t, mt::DeviceCollectives* c) : type(t) { mt::register_device_collectives(t, c); }
  ~Registered() { mt::register_device_collectives(type, nullptr); }
  mt::DeviceType type;
};

TEST(DeviceCollectives, ADeviceTypeWithoutAnyHasNoneAndTheErrorSaysSo) {
  EXPECT_EQ(mt::device_collectives(mt::kChecked), nullptr);
  EXPECT_EQ(mt::device_collectives(mt::kCPU), nullptr);
  EXPECT_EQ(mt::device_collectives(mt::kPrivateUse1), nullptr);
  EXPECT_MT_ERROR(mt::require_device_collectives(mt::kChecked), "device collectives", "none for device type checked",
                  "register_device_collectives");
}

TEST(DeviceCollectives, CudaHasNcclExactlyWhenTheBuildHasIt) {
  mt::DeviceCollectives* nccl = mt::device_collectives(mt::kCUDA);
  // MIXTRAIN_TEST_WITH_NCCL: what CMake decided (cmake/Nccl.cmake), from tests/CMakeLists.txt.
  EXPECT_EQ(nccl != nullptr, MIXTRAIN_TEST_WITH_NCCL == 1);
  if (nccl != nullptr) {
    EXPECT_EQ(nccl->name(), "nccl");
    EXPECT_EQ(&mt::require_device_collectives(mt::kCUDA), nccl);
  } else {
    // A build without the CUDA backend or without NCCL names the option that brings it.
    EXPECT_MT_ERROR(mt::require_device_collectives(mt::kCUDA), "none for device type cuda", "no NCCL", "MIXTRAIN_NCCL");
  }
}

TEST(DeviceCollectives, ARegistrationIsFoundAndItsRemovalForgetsIt) {
  RecordingCollectives c;
  {
    Registered r(mt::kChecked, &c);
    EXPECT_EQ(mt::device_collectives(mt::kChecked), &c);
    EXPECT_EQ(&mt::require_device_collectives(mt::kChecked), &c);
    EXPECT_EQ(mt::device_collectives(mt::kPrivateUse1), nullptr) << "registered for one type only";
  }
  EXPECT_EQ(mt::device_collectives(mt::kChecked), nullptr);
  // A registration replaces CUDA's built-in ones, and its removal brings them back.
  mt::DeviceCollectives* builtin = mt::device_collectives(mt::kCUDA);
  {
    Registered r(mt::kCUDA, &c);
    EXPECT_EQ(mt::device_collectives(mt::kCUDA), &c);
  }
  EXPECT_EQ(mt::device_collectives(mt::kCUDA), builtin);
}

TEST(DeviceCollectives, ConnectChecksRankSizeAndId) {
  RecordingCollectives c;
  const mt::Device dev = mt::testing::checked_device();
  const std::vector<uint8_t> id = c.create_unique_id();
  EXPECT_MT_ERROR(c.connect(id, 2, 2, dev), "recording", "rank 2 of 2");
  EXPECT_MT_ERROR(c.connect(id, -1, 2, dev), "rank -1 of 2");
  EXPECT_MT_ERROR(c.connect(id, 0, 0, dev), "rank 0 of 0");
  EXPECT_MT_ERROR(c.connect({}, 0, 1, dev), "empty unique id");
  EXPECT_TRUE(c.log.empty()) << "nothing reached the backend";
  auto comm = c.connect(id, 1, 3, dev);
  EXPECT_EQ(comm->rank(), 1);
  EXPECT_EQ(comm->size(), 3);
  EXPECT_EQ(comm->device(), dev);
  EXPECT_EQ(c.log, (std::vector<std::string>{"connect 3 1/3"}));
}

TEST(DeviceCollectives, CollectivesCheckTheirTensorsBeforeTheBackendSeesThem) {
  RecordingCollectives c;
  const mt::Device dev = mt::testing::checked_device();
  auto comm = c.connect(c.create_unique_id(), 0, 2, dev);
  c.log.clear();
  const mt::Tensor on_cpu = mt::zeros({4}, {.device = mt::kCPU});
  EXPECT_MT_ERROR(comm->all_reduce(on_cpu), "all_reduce", "on cpu", "communicator on checked:0");
  EXPECT_MT_ERROR(comm->broadcast(on_cpu), "broadcast", "on cpu");
  const mt::Tensor m = mt::zeros({3, 4}, {.device = dev});
  EXPECT_MT_ERROR(comm->all_reduce(m.transpose(0, 1)), "contiguous");
  EXPECT_MT_ERROR(comm->all_reduce(mt::zeros({4}, {.dtype = mt::kUInt8, .device = dev})), "uint8", "not supported");
  EXPECT_MT_ERROR(comm->all_reduce(mt::zeros({4}, {.dtype = mt::kInt64, .device = dev}), mt::DeviceReduceOp::kAvg),
                  "avg of an integer tensor", "int64");
  EXPECT_MT_ERROR(comm->broadcast(m, 2), "broadcast from rank 2", "of 2 ranks");
  EXPECT_MT_ERROR(comm->all_reduce(mt::Tensor()), "undefined");
  // all_gather: both tensors on the device, contiguous, one dtype, the output size() times the input.
  const mt::Tensor in = mt::zeros({3}, {.device = dev}), out = mt::zeros({6}, {.device = dev});
  EXPECT_MT_ERROR(comm->all_gather(on_cpu, out), "all_gather", "on cpu");
  EXPECT_MT_ERROR(comm->all_gather(in, mt::zeros({6}, {.device = mt::kCPU})), "all_gather", "on cpu");
  EXPECT_MT_ERROR(comm->all_gather(in, m.transpose(0, 1)), "all_gather", "contiguous");
  EXPECT_MT_ERROR(comm->all_gather(in, mt::zeros({6}, {.dtype = mt::kBFloat16, .device = dev})),
                  "float32 into bfloat16");
  EXPECT_MT_ERROR(comm->all_gather(in, mt::zeros({7}, {.device = dev})), "3 elements per rank over 2 ranks",
                  "output of 6 elements");
  EXPECT_MT_ERROR(comm->all_gather(out.narrow(0, 3, 3), out), "overlaps", "rank 0", "[0, 3)");  // rank 1's block
  EXPECT_MT_ERROR(comm->all_gather(out.narrow(0, 2, 3), out), "overlaps");
  EXPECT_MT_ERROR(comm->all_gather(mt::Tensor(), out), "undefined");
  EXPECT_TRUE(c.log.empty()) << "nothing reached the backend";

  // Valid calls reach it, and count as in-place writes of the tensor.
  const mt::Tensor f = mt::zeros({5}, {.device = dev});
  const uint64_t v = f.version();
  comm->all_reduce(f);
  comm->all_reduce(f, mt::DeviceReduceOp::kAvg);
  comm->all_reduce(mt::zeros({2}, {.dtype = mt::kInt32, .device = dev}));
  comm->broadcast(mt::zeros({7}, {.dtype = mt::kBool, .device = dev}), 1);  // any dtype: bytes
  EXPECT_EQ(f.version(), v + 2);
  const uint64_t vo = out.version();
  comm->all_gather(in, out);
  comm->all_gather(out.narrow(0, 0, 3), out);  // in place: rank 0's own block, as NCCL allows
  comm->all_gather(mt::zeros({2, 2}, {.dtype = mt::kUInt8, .device = dev}),
                   mt::zeros({8}, {.dtype = mt::kUInt8, .device = dev}));  // any dtype, any shapes of that size
  EXPECT_EQ(out.version(), vo + 2) << "the output is written in place";
  EXPECT_EQ(c.log, (std::vector<std::string>{"all_reduce sum 5", "all_reduce avg 5", "all_reduce sum 2",
                                             "broadcast 1 7", "all_gather 3 6", "all_gather 3 6", "all_gather 4 8"}));
}

TEST(DeviceCollectives, ReduceOpsHaveNames) {
  EXPECT_EQ(mt::to_string(mt::DeviceReduceOp::kSum), "sum");
  EXPECT_EQ(mt::to_string(mt::DeviceReduceOp::kAvg), "avg");
}

}  // namespace
