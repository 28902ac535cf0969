// DistributedDataParallel's device-collectives path (core/device_collectives.h, docs/distributed.md
// "Models on a device") without a GPU: the test registers, for the checked device, collectives whose
// communicator stages each tensor through the host and the process group (what NCCL would do in device
// memory), and records every call (support/host_staged_collectives.h). DDP must then bootstrap a
// communicator (the unique id made on rank 0 only and broadcast over the group), broadcast rank 0's
// parameters through it, and reduce every bucket through it in bucket order during backward, reaching
// the CPU model's bits. One process (everywhere): the path choice and its errors; two processes
// (CTest's mpi:ddp, `mpirun -np 2`): training in fp32, bf16 and fp16 against the CPU model.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "core/device_collectives.h"
#include "mixtrain/dist/ddp.h"
#include "mixtrain/dist/process_group.h"
#include "mixtrain/mixtrain.h"
#include "dist/dist_fixtures.h"
#include "support/checked_device.h"
#include "support/expect_error.h"
#include "support/host_staged_collectives.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
namespace dist = mixtrain::dist;

namespace {

#define MT_REQUIRE_TWO_RANKS() MT_REQUIRE_SEVERAL_RANKS("mpi:ddp")

using mt::testing::CollectiveEvent;
using mt::testing::HostStagedCollectives;
using mt::testing::RegisteredForChecked;

using Data = mt::testing::DistBatch;
using mt::testing::full_batch;
using mt::testing::shard;
std::shared_ptr<mt::nn::Sequential> make_model(uint64_t seed) { return mt::testing::small_mlp(seed); }

// The element counts of the buckets, in bucket (= issue) order.
std::vector<int64_t> bucket_numels(const dist::DistributedDataParallel& ddp, const std::vector<mt::Tensor>& params) {
  std::vector<int64_t> out;
  for (const auto& bucket : ddp.bucket_assignment()) {
    int64_t n = 0;
    for (int64_t i : bucket) n += params[i].numel();
    out.push_back(n);
  }
  return out;
}

// ---- one process
TEST(DdpDevice, ForcedDeviceCollectivesAreTakenByAGroupOfOne) {
  auto group = dist::make_single_process_group();
  HostStagedCollectives collectives(*group);
  RegisteredForChecked registered(&collectives);
  const mt::Device device = mt::testing::checked_device();
  auto model = make_model(4);
  auto plain = make_model(4);
  model->to(device);
  dist::DistributedDataParallel ddp(
      *model, *group, {.bucket_cap_mb = 100.0 / (1024 * 1024), .reduction = dist::ReductionPath::kDeviceCollectives});
  EXPECT_EQ(ddp.reduction_path(), dist::ReductionPath::kDeviceCollectives);
  EXPECT_EQ(ddp.reduction_backend(), "host-staged (test)");
  EXPECT_EQ(collectives.ids_made, 1);
  ASSERT_EQ(collectives.connected_ids.size(), 1u);
  EXPECT_EQ(collectives.connected_ids[0], mt::testing::host_staged_id());
  const std::vector<mt::Tensor> params = model->parameters();
  ASSERT_EQ(collectives.of_kind("broadcast").size(), params.size()) << "one broadcast per parameter";
  collectives.events.clear();

  const Data d = shard(full_batch(8), 0, 1);
  F::cross_entropy((*model)(d.x.to(device)), d.y.to(device)).backward();
  F::cross_entropy((*plain)(d.x), d.y).backward();
  std::vector<int64_t> reduced;
  for (const CollectiveEvent& e : collectives.events) {
    EXPECT_EQ(e.kind, "all_reduce sum");
    EXPECT_TRUE(e.in_backward) << "buckets are reduced while backward runs";
    reduced.push_back(e.numel);
  }
  EXPECT_EQ(reduced, bucket_numels(ddp, params));
  EXPECT_GT(reduced.size(), 1u);
  const std::vector<mt::Tensor> q = plain->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_EQ(params[i].grad().to(mt::kCPU).to_vector<float>(), q[i].grad().to_vector<float>()) << i;
  EXPECT_EQ(ddp.stats().buckets_reduced, static_cast<int64_t>(reduced.size()));
}

TEST(DdpDevice, AutoStaysOnTheProcessGroupWithOneRankOrWhenForced) {
  auto group = dist::make_single_process_group();
  HostStagedCollectives collectives(*group);
  RegisteredForChecked registered(&collectives);
  auto model = make_model(5);
  model->to(mt::testing::checked_device());
  for (dist::ReductionPath wanted : {dist::ReductionPath::kAuto, dist::ReductionPath::kProcessGroup}) {
    SCOPED_TRACE(dist::to_string(wanted));
    dist::DistributedDataParallel ddp(*model, *group, {.reduction = wanted});
    EXPECT_EQ(ddp.reduction_path(), dist::ReductionPath::kProcessGroup);
    EXPECT_EQ(ddp.reduction_backend(), "single");
  }
  EXPECT_EQ(collectives.ids_made, 0);
  EXPECT_TRUE(collectives.events.empty()) << "no communicator was connected";
}

TEST(DdpDevice, RequiredDeviceCollectivesAreRefusedWhereThereAreNone) {
  auto group = dist::make_single_process_group();
  auto cpu_model = make_model(6);
  EXPECT_MT_ERROR(
      dist::DistributedDataParallel(*cpu_model, *group, {.reduction = dist::ReductionPath::kDeviceCollectives}),
      "DistributedDataParallel", "device collectives", "parameters are on the cpu");
  auto model = make_model(6);
  model->to(mt::testing::checked_device());
  ASSERT_EQ(mt::device_collectives(mt::kChecked), nullptr);
  EXPECT_MT_ERROR(dist::DistributedDataParallel(*model, *group, {.reduction = dist::ReductionPath::kDeviceCollectives}),
                  "none for device type checked");
  // Without a registration, auto takes the process group.
  dist::DistributedDataParallel ddp(*model, *group);
  EXPECT_EQ(ddp.reduction_path(), dist::ReductionPath::kProcessGroup);
}

TEST(DdpDevice, PathsHaveNames) {
  EXPECT_EQ(dist::to_string(dist::ReductionPath::kAuto), "auto");
  EXPECT_EQ(dist::to_string(dist::ReductionPath::kProcessGroup), "process group");
  EXPECT_EQ(dist::to_string(dist::ReductionPath::kDeviceCollectives), "device collectives");
}

// ---- two processes
// A model on the checked device, built per rank from a different seed, trains through the device
// path (auto: two ranks and registered collectives) to the bits of the CPU model trained through the
// process group: fp32, bf16 autocast, fp16 autocast with the GradScaler, 3 AdamW steps each, one
// bucket per parameter.
TEST(DdpDeviceMpi, ADeviceModelTrainsThroughDeviceCollectivesToTheCpuModelsBits) {
  MT_REQUIRE_TWO_RANKS();
  dist::ProcessGroup& g = dist::world();
  HostStagedCollectives collectives(g);
  RegisteredForChecked registered(&collectives);
  const mt::Device device = mt::testing::checked_device();
  ASSERT_EQ(mt::default_device(), mt::Device{});
  const Data d = shard(full_batch(16), g.rank(), g.size());
  constexpr int kSteps = 3;
  for (std::optional<mt::DType> amp :
       {std::optional<mt::DType>{}, std::optional<mt::DType>{mt::kBFloat16}, std::optional<mt::DType>{mt::kFloat16}}) {
    SCOPED_TRACE(amp ? std::string(mt::to_string(*amp)) : "fp32");
    collectives.events.clear();
    collectives.connected_ids.clear();
    collectives.ids_made = 0;
    std::vector<int64_t> buckets;
    auto train = [&](const mt::Device& where) {
      auto model = make_model(30 + g.rank());  // differs per rank: the broadcast makes it rank 0's
      model->to(where);
      dist::DistributedDataParallel ddp(*model, g, {.bucket_cap_mb = 100.0 / (1024 * 1024)});
      EXPECT_EQ(ddp.reduction_path(),
                where.is_cpu() ? dist::ReductionPath::kProcessGroup : dist::ReductionPath::kDeviceCollectives);
      if (!where.is_cpu()) buckets = bucket_numels(ddp, model->parameters());
      mt::optim::AdamW opt(model->parameters(), {.lr = 0.01});
      mt::amp::GradScaler scaler({.enabled = amp == mt::kFloat16});
      return mt::testing::train_amp_steps(*model, opt, scaler, d, where, amp, kSteps);
    };
    const auto on_device = train(device);
    EXPECT_EQ(on_device, train(mt::kCPU));

    // The bootstrap: the id made on rank 0 only, every rank connected with it.
    EXPECT_EQ(collectives.ids_made, g.rank() == 0 ? 1 : 0);
    ASSERT_EQ(collectives.connected_ids.size(), 1u);
    EXPECT_EQ(collectives.connected_ids[0], mt::testing::host_staged_id());
    // Rank 0's parameters through the communicator, then each step's buckets in order, in backward.
    EXPECT_EQ(collectives.of_kind("broadcast").size(), 4u);
    std::vector<int64_t> reduced, expected;
    for (const CollectiveEvent& e : collectives.of_kind("all_reduce sum")) {
      EXPECT_TRUE(e.in_backward);
      reduced.push_back(e.numel);
    }
    for (int step = 0; step < kSteps; ++step) expected.insert(expected.end(), buckets.begin(), buckets.end());
    EXPECT_EQ(reduced, expected);
    EXPECT_TRUE(collectives.of_kind("all_reduce avg").empty()) << "DDP sums and divides itself";
  }
}

TEST(DdpDeviceMpi, ForcingTheProcessGroupLeavesTheDeviceCollectivesUnused) {
  MT_REQUIRE_TWO_RANKS();
  dist::ProcessGroup& g = dist::world();
  HostStagedCollectives collectives(g);
  RegisteredForChecked registered(&collectives);
  auto model = make_model(40 + g.rank());
  model->to(mt::testing::checked_device());
  dist::DistributedDataParallel ddp(*model, g, {.reduction = dist::ReductionPath::kProcessGroup});
  EXPECT_EQ(ddp.reduction_path(), dist::ReductionPath::kProcessGroup);
  EXPECT_EQ(ddp.reduction_backend(), g.backend_name());
  const Data d = shard(full_batch(8), g.rank(), g.size());
  F::cross_entropy((*model)(d.x.to(model->parameters()[0].device())), d.y.to(model->parameters()[0].device()))
      .backward();
  EXPECT_EQ(ddp.stats().reductions, 1);
  EXPECT_EQ(collectives.ids_made, 0);
  EXPECT_TRUE(collectives.events.empty());
}

TEST(DdpDeviceMpi, RanksThatWouldTakeDifferentPathsAreRefusedOnEveryRank) {
  MT_REQUIRE_TWO_RANKS();
  dist::ProcessGroup& g = dist::world();
  HostStagedCollectives collectives(g);
  RegisteredForChecked registered(&collectives);
  auto model = make_model(50);
  model->to(mt::testing::checked_device());
  const dist::ReductionPath wanted = g.rank() == 1 ? dist::ReductionPath::kProcessGroup : dist::ReductionPath::kAuto;
  EXPECT_MT_ERROR(dist::DistributedDataParallel(*model, g, {.reduction = wanted}),
                  "rank 1 reduces through process group", "rank 0 through device collectives");
  EXPECT_TRUE(collectives.events.empty()) << "no communicator was connected";
  g.barrier();  // both ranks got here: neither waits in a collective the other skipped
}

}  // namespace
