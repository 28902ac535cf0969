// The NCCL smoke test (mixtrain_nccl_smoke, built with NCCL; scripts/gpu-check.sh runs it on a GPU,
// phase nccl): CUDA's device collectives in a world of one process and one GPU. The unique id, a
// communicator of size 1, all_reduce (sum, avg) and broadcast of CUDA tensors of each dtype enqueued
// after the kernel that wrote them, all_gather of each dtype (out of place and in place), the argument
// errors, DistributedDataParallel over a CUDA model forced onto the NCCL path: the same bits as the
// model without DDP and as the host-staged path, with no host wait added to a backward; and ZeRO-1's
// parameter all-gather forced onto NCCL: the bits of plain AdamW and of the host path.
//
// Not registered with CTest: without a GPU every test could only skip. Until the GPU check has run it,
// the NCCL path is compiled and reviewed but unverified on a GPU (docs/distributed.md).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/device_collectives.h"
#include "mixtrain/cuda.h"
#include "mixtrain/dist/ddp.h"
#include "mixtrain/dist/process_group.h"
#include "mixtrain/dist/zero.h"
#include "mixtrain/mixtrain.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
namespace dist = mixtrain::dist;

namespace {

#define MT_REQUIRE_GPU() \
  if (!mt::cuda::is_available()) GTEST_SKIP() << "no GPU: " << mt::cuda::unavailable_reason()

const mt::Device kGpu{mt::kCUDA, 0};

std::vector<uint8_t> bytes_of(const mt::Tensor& t) {
  const mt::Tensor h = t.to(mt::kCPU).contiguous();
  const auto* p = static_cast<const uint8_t*>(h.raw_data());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

std::unique_ptr<mt::DeviceCommunicator> world_of_one() {
  mt::DeviceCollectives& nccl = mt::require_device_collectives(mt::kCUDA);
  return nccl.connect(nccl.create_unique_id(), 0, 1, kGpu);
}

TEST(NcclSmoke, TheCudaBackendRegistersNccl) {
  mt::DeviceCollectives& nccl = mt::require_device_collectives(mt::kCUDA);
  EXPECT_EQ(nccl.name(), "nccl");
  // NCCL_UNIQUE_ID_BYTES; making one needs no GPU (NCCL's bootstrap listens on a socket).
  const std::vector<uint8_t> a = nccl.create_unique_id(), b = nccl.create_unique_id();
  EXPECT_EQ(a.size(), 128u);
  EXPECT_NE(a, b) << "two ids name two communicators";
}

TEST(NcclSmoke, AllReduceAndBroadcastInAWorldOfOneKeepEveryBit) {
  MT_REQUIRE_GPU();
  auto comm = world_of_one();
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->device(), kGpu);
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16, mt::kFloat16, mt::kFloat64}) {
    SCOPED_TRACE(mt::to_string(dt));
    mt::Generator g(3);
    const mt::Tensor src = mt::randn({1000, 37}, {.dtype = dt, .device = mt::kCPU}, &g);
    // Written by a kernel on the device's stream just before: the collective must run after it.
    const mt::Tensor x = mt::mul(src.to(kGpu), 2.0);
    const std::vector<uint8_t> expected = bytes_of(mt::mul(src, 2.0));
    comm->all_reduce(x, mt::DeviceReduceOp::kSum);
    EXPECT_EQ(bytes_of(x), expected) << "a sum over one rank is the tensor itself";
    comm->all_reduce(x, mt::DeviceReduceOp::kAvg);
    EXPECT_EQ(bytes_of(x), expected);
    comm->broadcast(x, 0);
    EXPECT_EQ(bytes_of(x), expected);
  }
  const mt::Tensor i = mt::arange(100, {.dtype = mt::kInt64, .device = kGpu});
  comm->all_reduce(i);
  EXPECT_EQ(i.to_vector<int64_t>()[99], 99);
  const mt::Tensor flags = mt::ones({13}, {.dtype = mt::kBool, .device = kGpu});
  comm->broadcast(flags, 0);  // any dtype, as bytes
  EXPECT_EQ(flags.to_vector<int64_t>(), std::vector<int64_t>(13, 1));
}

// ncclAllGather in a world of one: the output is the input, every byte, for each dtype (moved as bytes),
// out of place and in place (the input being the output's own block).
TEST(NcclSmoke, AllGatherInAWorldOfOneCopiesEveryByte) {
  MT_REQUIRE_GPU();
  auto comm = world_of_one();
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16, mt::kFloat16, mt::kFloat64}) {
    SCOPED_TRACE(mt::to_string(dt));
    mt::Generator g(4);
    const mt::Tensor src = mt::randn({777}, {.dtype = dt, .device = mt::kCPU}, &g);
    const mt::Tensor x = mt::mul(src.to(kGpu), 3.0);  // written by a kernel just before: gathered after it
    const std::vector<uint8_t> expected = bytes_of(mt::mul(src, 3.0));
    const mt::Tensor out = mt::zeros({777}, {.dtype = dt, .device = kGpu});
    comm->all_gather(x, out);
    EXPECT_EQ(bytes_of(out), expected);
    comm->all_gather(out, out);  // in place
    EXPECT_EQ(bytes_of(out), expected);
  }
  const mt::Tensor i = mt::arange(50, {.dtype = mt::kInt64, .device = kGpu});
  const mt::Tensor io = mt::zeros({50}, {.dtype = mt::kInt64, .device = kGpu});
  comm->all_gather(i, io);
  EXPECT_EQ(io.to_vector<int64_t>(), i.to_vector<int64_t>());
}

TEST(NcclSmoke, BadArgumentsAreMtErrors) {
  MT_REQUIRE_GPU();
  mt::DeviceCollectives& nccl = mt::require_device_collectives(mt::kCUDA);
  EXPECT_MT_ERROR(nccl.connect(std::vector<uint8_t>(16, 1), 0, 1, kGpu), "nccl", "128 bytes, got 16");
  EXPECT_MT_ERROR(nccl.connect(nccl.create_unique_id(), 0, 1, mt::Device(mt::kCUDA, 999)), "cuda:999");
  auto comm = world_of_one();
  EXPECT_MT_ERROR(comm->all_reduce(mt::zeros({4}, {.device = mt::kCPU})), "on cpu", "communicator on cuda:0");
  EXPECT_MT_ERROR(comm->broadcast(mt::zeros({4}, {.device = kGpu}), 1), "broadcast from rank 1");
  EXPECT_MT_ERROR(comm->all_gather(mt::zeros({4}, {.device = kGpu}), mt::zeros({5}, {.device = kGpu})), "all_gather",
                  "output of 4 elements");
}

// DDP over a CUDA model, forced onto the NCCL path with one rank (kAuto would take the process group:
// a world of one has nothing to reduce), against the same model without DDP and with DDP host-staged.
TEST(NcclSmoke, DdpOverACudaModelTakesTheNcclPathToTheSameBits) {
  MT_REQUIRE_GPU();
  auto group = dist::make_single_process_group();
  mt::Generator g(9);
  const mt::Tensor x = mt::randn({32, 20}, {.device = mt::kCPU}, &g).to(kGpu);
  const mt::Tensor y = mt::randint(0, 4, {32}, {.dtype = mt::kInt64, .device = mt::kCPU}, &g).to(kGpu);
  auto train = [&](std::optional<dist::ReductionPath> path, mt::SyncCounts* backward_waits) {
    mt::manual_seed(1);
    mt::nn::Sequential model(mt::nn::Linear(20, 64), mt::nn::ReLU(), mt::nn::Linear(64, 4));
    model.to(kGpu);
    std::unique_ptr<dist::DistributedDataParallel> ddp;
    if (path) {
      ddp = std::make_unique<dist::DistributedDataParallel>(
          model, *group, dist::DdpOptions{.bucket_cap_mb = 4096.0 / (1024 * 1024), .reduction = *path});
      EXPECT_EQ(ddp->reduction_path(), *path);
      EXPECT_EQ(ddp->reduction_backend(), *path == dist::ReductionPath::kDeviceCollectives ? "nccl" : "single");
    }
    mt::optim::AdamW opt(model.parameters(), {.lr = 0.01});
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      mt::Tensor loss;
      {
        mt::amp::Autocast ac(mt::kCUDA, mt::kBFloat16);
        loss = F::cross_entropy(model(x), y);
      }
      const mt::SyncCounts before = mt::sync_counts(kGpu);
      loss.backward();
      const mt::SyncCounts after = mt::sync_counts(kGpu);
      if (backward_waits != nullptr && step == 2)
        *backward_waits = {after.to_host - before.to_host, after.from_host - before.from_host,
                           after.synchronize - before.synchronize, after.kernel_results - before.kernel_results};
      opt.step();
    }
    if (ddp) {
      EXPECT_GT(ddp->stats().buckets_reduced, 3);
    }
    std::vector<std::vector<uint8_t>> out;
    for (const mt::Tensor& p : model.parameters()) out.push_back(bytes_of(p));
    return out;
  };
  mt::SyncCounts plain_waits, nccl_waits, staged_waits;
  const auto plain = train(std::nullopt, &plain_waits);
  const auto nccl = train(dist::ReductionPath::kDeviceCollectives, &nccl_waits);
  const auto staged = train(dist::ReductionPath::kProcessGroup, &staged_waits);
  EXPECT_EQ(nccl, plain);
  EXPECT_EQ(nccl, staged);
  EXPECT_EQ(nccl_waits.total(), plain_waits.total()) << "the NCCL path adds no host wait to backward";
  EXPECT_GT(staged_waits.to_host, plain_waits.to_host) << "host staging copies each bucket to the host";
}

// ZeRO-1 over a CUDA model, its all-gather forced onto NCCL with one rank (auto would take the process
// group: one rank has nothing to gather), against plain AdamW and against the host path, bit for bit.
TEST(NcclSmoke, ZeroOverACudaModelGathersThroughNcclToTheSameBits) {
  MT_REQUIRE_GPU();
  auto group = dist::make_single_process_group();
  mt::Generator g(10);
  const mt::Tensor x = mt::randn({32, 20}, {.device = mt::kCPU}, &g).to(kGpu);
  const mt::Tensor y = mt::randint(0, 4, {32}, {.dtype = mt::kInt64, .device = mt::kCPU}, &g).to(kGpu);
  auto train = [&](std::optional<dist::ReductionPath> path) {
    mt::manual_seed(2);
    mt::nn::Sequential model(mt::nn::Linear(20, 64), mt::nn::ReLU(), mt::nn::Linear(64, 4));
    model.to(mt::kBFloat16).to(kGpu);
    std::vector<mt::optim::NamedParameter> params;
    for (auto& [name, p] : model.named_parameters()) params.push_back({name, p});
    std::unique_ptr<mt::optim::Optimizer> opt;
    if (path) {
      auto zero = std::make_unique<dist::ZeroRedundancyOptimizer>(
          std::move(params), *group,
          [](std::vector<mt::optim::NamedParameter> shard) -> std::unique_ptr<mt::optim::Optimizer> {
            return std::make_unique<mt::optim::AdamW>(std::move(shard), mt::optim::AdamOptions{.lr = 0.01});
          },
          dist::ZeroOptions{.gather = *path});
      EXPECT_EQ(zero->gather_path(), *path);
      EXPECT_EQ(zero->gather_backend(), *path == dist::ReductionPath::kDeviceCollectives ? "nccl" : "single");
      opt = std::move(zero);
    } else {
      opt = std::make_unique<mt::optim::AdamW>(std::move(params), mt::optim::AdamOptions{.lr = 0.01});
    }
    for (int step = 0; step < 3; ++step) {
      opt->zero_grad();
      F::cross_entropy(model(x.to(mt::kBFloat16)).to(mt::kFloat32), y).backward();
      opt->step();
    }
    std::vector<std::vector<uint8_t>> out;
    for (const mt::Tensor& p : model.parameters()) out.push_back(bytes_of(p));
    return out;
  };
  const auto plain = train(std::nullopt);
  EXPECT_EQ(train(dist::ReductionPath::kDeviceCollectives), plain);
  EXPECT_EQ(train(dist::ReductionPath::kProcessGroup), plain);
}

}  // namespace
