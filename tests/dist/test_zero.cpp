// ZeroRedundancyOptimizer (ZeRO-1): the partition, the state pieces and their re-sharding in one
// process; under `mpirun -np 2` and `-np 3` (CTest's mpi:zero_2, mpi:zero_3, uneven shards that
// straddle parameters) the trajectory against plain DDP, bit for bit, in fp32, bf16 and fp16 with
// the GradScaler, the gathered state against DDP's optimizer state, the per-rank state bytes, and a
// model on the checked device against the same model on the CPU. ZeroDevice* / ZeroDeviceMpi*: the
// parameter all-gather through device collectives (host-staged test ones registered for the checked
// device, support/host_staged_collectives.h): the choice of path, its errors, and the CPU run's bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/device_collectives.h"
#include "mixtrain/dist/ddp.h"
#include "mixtrain/dist/process_group.h"
#include "mixtrain/dist/zero.h"
#include "mixtrain/mixtrain.h"
#include "dist/dist_fixtures.h"
#include "support/checked_device.h"
#include "support/expect_error.h"
#include "support/host_staged_collectives.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
namespace dist = mixtrain::dist;

namespace {

// 6*64 + 64 + 64*3 + 3 = 643 elements: 321/322 over 2 ranks, 214/214/215 over 3, each cut inside a
// weight with more than 32 elements after the cut (the vector kernels' width: an element's random
// bits must follow its position within the whole parameter on every path).
constexpr int64_t kElements = 643;
std::shared_ptr<mt::nn::Sequential> make_model(uint64_t seed) { return mt::testing::small_mlp(seed, 64); }

std::vector<mt::optim::NamedParameter> named(mt::nn::Module& m) {
  std::vector<mt::optim::NamedParameter> out;
  for (auto& [name, p] : m.named_parameters()) out.push_back({name, p});
  return out;
}

constexpr mt::optim::AdamOptions kAdam{.lr = 0.01, .weight_decay = 0.1};

dist::ZeroRedundancyOptimizer::LocalFactory adamw(const mt::optim::AdamOptions& o = kAdam) {
  return [o](std::vector<mt::optim::NamedParameter> shard) -> std::unique_ptr<mt::optim::Optimizer> {
    return std::make_unique<mt::optim::AdamW>(std::move(shard), o);
  };
}

std::vector<float> values(const mt::Tensor& t) { return t.to(mt::kCPU).to(mt::kFloat32).to_vector<float>(); }

// Bit equality of two state dicts (same keys, dtypes and values).
void expect_same_state(const mt::optim::OptimizerStateDict& a, const mt::optim::OptimizerStateDict& b) {
  ASSERT_EQ(a.state.size(), b.state.size());
  for (size_t i = 0; i < a.state.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i));
    EXPECT_EQ(a.state[i].step, b.state[i].step);
    const auto ta = a.state[i].named_tensors(), tb = b.state[i].named_tensors();
    ASSERT_EQ(ta.size(), tb.size());
    for (size_t k = 0; k < ta.size(); ++k) {
      EXPECT_EQ(ta[k].first, tb[k].first);
      EXPECT_EQ(ta[k].second.dtype(), tb[k].second.dtype()) << ta[k].first;
      EXPECT_EQ(ta[k].second.shape(), tb[k].second.shape()) << ta[k].first;
      EXPECT_EQ(values(ta[k].second), values(tb[k].second)) << ta[k].first;
    }
  }
  EXPECT_EQ(a.param_groups, b.param_groups);
}

// ---- one process -------------------------------------------------------------------------------

TEST(Zero, OneRankOwnsEverythingAndStepsLikeItsOptimizer) {
  auto a = make_model(3), b = make_model(3);
  auto group = dist::make_single_process_group();
  mt::optim::AdamW plain(named(*a), kAdam);
  dist::ZeroRedundancyOptimizer zero(named(*b), *group, adamw());
  EXPECT_EQ(zero.total_elements(), kElements);
  EXPECT_EQ(zero.owned_range(0), (std::pair<int64_t, int64_t>{0, kElements}));
  EXPECT_STREQ(zero.name(), "AdamW");
  mt::Generator g(5);
  const mt::Tensor x = mt::randn({8, 6}, {}, &g), y = mt::randint(0, 3, {8}, {.dtype = mt::kInt64}, &g);
  for (int step = 0; step < 4; ++step) {
    for (auto [model, opt] : {std::pair<mt::nn::Module*, mt::optim::Optimizer*>{a.get(), &plain}, {b.get(), &zero}}) {
      opt->zero_grad();
      F::cross_entropy((*model)(x), y).backward();
      opt->step();
    }
  }
  const auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(values(pa[i]), values(pb[i])) << i;
  expect_same_state(zero.state_dict(), plain.state_dict());
  EXPECT_EQ(zero.state_bytes().total(), plain.state_bytes().total());
}

// Saved pieces from any partition load into any other: here the state of one rank is cut as 3, 5
// and 2 ranks would have cut it, and each layout is loaded back whole.
TEST(Zero, StatePiecesFromAnyPartitionLoadBack) {
  auto m = make_model(4);
  auto group = dist::make_single_process_group();
  dist::ZeroRedundancyOptimizer zero(named(*m), *group, adamw());
  mt::Generator g(6);
  const mt::Tensor x = mt::randn({8, 6}, {}, &g), y = mt::randint(0, 3, {8}, {.dtype = mt::kInt64}, &g);
  for (int step = 0; step < 3; ++step) {
    zero.zero_grad();
    F::cross_entropy((*m)(x), y).backward();
    zero.step();
  }
  const mt::optim::OptimizerStateDict before = zero.state_dict();
  const std::vector<dist::ZeroStatePiece> whole = zero.local_state_pieces();
  ASSERT_EQ(whole.size(), 4u);  // one per parameter
  for (int world : {3, 5, 2}) {
    SCOPED_TRACE("cut for " + std::to_string(world) + " ranks");
    // Re-cut each piece at the boundaries of `world` ranks over the kElements elements.
    std::vector<dist::ZeroStatePiece> cut;
    int64_t offset = 0;
    for (const dist::ZeroStatePiece& p : whole) {
      for (int r = 0; r < world; ++r) {
        const int64_t lo = kElements * r / world - offset, hi = kElements * (r + 1) / world - offset;
        const int64_t b = std::max(lo, p.begin), e = std::min(hi, p.end);
        if (b >= e) continue;
        dist::ZeroStatePiece q{p.param, b, e, p.step, {}};
        for (const auto& [key, t] : p.tensors) q.tensors.emplace_back(key, t.narrow(0, b, e - b).clone());
        cut.push_back(std::move(q));
      }
      offset += p.end;
    }
    EXPECT_GT(cut.size(), whole.size());
    // Scribble over the state, then load the cut pieces back.
    auto other = make_model(4);
    dist::ZeroRedundancyOptimizer fresh(named(*other), *group, adamw());
    fresh.load_state_pieces(cut);
    fresh.set_hyperparameters(0, before.param_groups[0]);
    expect_same_state(fresh.state_dict(), before);
  }
}

TEST(Zero, BadPiecesAreRefusedBeforeAnythingChanges) {
  auto m = make_model(5);
  auto group = dist::make_single_process_group();
  dist::ZeroRedundancyOptimizer zero(named(*m), *group, adamw());
  mt::Generator g(7);
  const mt::Tensor x = mt::randn({4, 6}, {}, &g), y = mt::randint(0, 3, {4}, {.dtype = mt::kInt64}, &g);
  zero.zero_grad();
  F::cross_entropy((*m)(x), y).backward();
  zero.step();
  const std::vector<dist::ZeroStatePiece> good = zero.local_state_pieces();
  const mt::optim::OptimizerStateDict before = zero.state_dict();

  auto gap = good;
  gap[1].begin += 1;
  for (auto& [key, t] : gap[1].tensors) t = t.narrow(0, 1, t.numel() - 1);
  EXPECT_MT_ERROR(zero.load_state_pieces(gap), "has a gap at element 0");

  auto missing = good;
  missing.pop_back();
  EXPECT_MT_ERROR(zero.load_state_pieces(missing), "does not cover 2.bias");

  auto overlap = good;
  dist::ZeroStatePiece extra = good[0];
  extra.begin = 1;
  for (auto& [key, t] : extra.tensors) t = t.narrow(0, 1, t.numel() - 1);
  overlap.push_back(extra);
  EXPECT_MT_ERROR(zero.load_state_pieces(overlap), "overlapping pieces");

  auto short_tensor = good;
  short_tensor[2].tensors[0].second = short_tensor[2].tensors[0].second.narrow(0, 0, 3);
  EXPECT_MT_ERROR(zero.load_state_pieces(short_tensor), "expected 192 elements in one dimension");

  auto bad_param = good;
  bad_param[0].param = 9;
  EXPECT_MT_ERROR(zero.load_state_pieces(bad_param), "names parameter 9 of 4");

  expect_same_state(zero.state_dict(), before);
}

// The ranges of any world size (what a resume re-cuts by) tile the elements, also where
// total * rank would overflow int64.
TEST(Zero, RangesOfAnyWorldSizeTileTheElements) {
  for (const int64_t total : {int64_t{7}, int64_t{643}, std::numeric_limits<int64_t>::max() / 3}) {
    for (const int64_t world : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}}) {
      int64_t next = 0;
      for (int64_t r = 0; r < world; ++r) {
        const auto [b, e] = dist::ZeroRedundancyOptimizer::range_of(total, r, world);
        EXPECT_EQ(b, next) << total << " over " << world;
        EXPECT_GE(e - b, total / world);
        EXPECT_LE(e - b, total / world + 1);
        next = e;
      }
      EXPECT_EQ(next, total) << total << " over " << world;
    }
  }
  EXPECT_EQ(dist::ZeroRedundancyOptimizer::range_of(643, 1, 2), (std::pair<int64_t, int64_t>{321, 643}));
  EXPECT_MT_ERROR(dist::ZeroRedundancyOptimizer::range_of(10, 2, 2), "rank 2 is not in a group of 2");
}

TEST(Zero, RefusesFactoriesWithSeveralGroupsAndEmptyOnes) {
  auto m = make_model(6);
  auto group = dist::make_single_process_group();
  EXPECT_MT_ERROR(dist::ZeroRedundancyOptimizer(named(*m), *group, nullptr), "factory is empty");
  auto two_groups = [](std::vector<mt::optim::NamedParameter> shard) -> std::unique_ptr<mt::optim::Optimizer> {
    std::vector<mt::optim::ParamGroupSpec<mt::optim::AdamOptions>> groups(2);
    for (size_t i = 0; i < shard.size(); ++i) groups[i % 2].params.push_back(shard[i].param);
    return std::make_unique<mt::optim::AdamW>(std::move(groups));
  };
  EXPECT_MT_ERROR(dist::ZeroRedundancyOptimizer(named(*m), *group, two_groups), "needs one group");
}

// ---- several processes -------------------------------------------------------------------------

// kBf16Stochastic: bf16 weights without masters, stochastically rounded, and a bf16 second moment
// (stochastically rounded too): the random bits must not depend on the shard.
enum class Mode { kFp32, kBf16, kFp16Scaler, kBf16Stochastic };

const char* mode_name(Mode m) {
  return m == Mode::kFp32 ? "fp32" : m == Mode::kBf16 ? "bf16" : m == Mode::kFp16Scaler ? "fp16+scaler" : "bf16 stochastic";
}

mt::optim::AdamOptions adam_options(Mode m) {
  mt::optim::AdamOptions o = kAdam;
  if (m == Mode::kBf16Stochastic) {
    o.master_weights = false;
    o.bf16_update = mt::optim::Bf16Update::kStochastic;
    o.exp_avg_sq_dtype = mt::kBFloat16;
    o.rounding_seed = 11;
  }
  return o;
}

// What follow_ddp's ZeRO run ended with: its weights (as floats) and the path its all-gather took.
struct Followed {
  std::vector<std::vector<float>> weights;
  dist::ReductionPath path = dist::ReductionPath::kAuto;
  std::string backend;
  int64_t chunk = 0;  // the all-gather's elements per rank: the longest rank's shard
};

// 20 steps of DDP + AdamW and of DDP + ZeRO-1 on the same data, compared after every step. 16-bit
// modes train 16-bit parameters with fp32 masters (but kBf16Stochastic); fp16 uses the GradScaler with a short growth
// interval (the scale moves) and an overflow on one rank at step 7 (every rank must skip it).
void follow_ddp(Mode mode, const mt::Device& device, dist::ZeroOptions zero_options = {}, Followed* out = nullptr) {
  dist::ProcessGroup& world = dist::world();
  const mt::DType dtype = mode == Mode::kFp32 ? mt::kFloat32 : mode == Mode::kFp16Scaler ? mt::kFloat16 : mt::kBFloat16;
  auto a = make_model(40 + world.rank()), b = make_model(40 + world.rank());  // DDP broadcasts rank 0's
  a->to(dtype).to(device);
  b->to(dtype).to(device);
  dist::DistributedDataParallel ddp_a(*a, world), ddp_b(*b, world);
  mt::optim::AdamW plain(named(*a), adam_options(mode));
  dist::ZeroRedundancyOptimizer zero(named(*b), world, adamw(adam_options(mode)), zero_options);
  const mt::amp::GradScalerOptions so{.init_scale = 1024.0, .growth_interval = 3, .enabled = mode == Mode::kFp16Scaler};
  mt::amp::GradScaler scaler_a(so), scaler_b(so);
  int skipped = 0;
  for (int step = 0; step < 20; ++step) {
    mt::Generator g(100 + step * 16 + world.rank());  // each rank its own samples
    const mt::Tensor x = mt::randn({6, 6}, {}, &g).to(dtype).to(device);
    const mt::Tensor y = mt::randint(0, 3, {6}, {.dtype = mt::kInt64}, &g).to(device);
    const bool overflow = mode == Mode::kFp16Scaler && step == 7 && world.rank() == world.size() - 1;
    for (auto [model, opt, scaler] : {std::tuple<mt::nn::Module*, mt::optim::Optimizer*, mt::amp::GradScaler*>{
                                          a.get(), &plain, &scaler_a},
                                      {b.get(), &zero, &scaler_b}}) {
      opt->zero_grad();
      mt::Tensor loss = F::cross_entropy((*model)(x).to(mt::kFloat32), y);
      if (overflow) loss = loss * 1e30f;
      scaler->scale(loss).backward();
      const bool stepped = scaler->step(*opt);
      if (opt == &zero && !stepped) ++skipped;
      scaler->update();
    }
    const auto pa = a->parameters(), pb = b->parameters();
    for (size_t i = 0; i < pa.size(); ++i) {
      ASSERT_EQ(pb[i].device(), device);
      ASSERT_EQ(values(pa[i]), values(pb[i])) << "parameter " << i << " after step " << step + 1;
    }
    ASSERT_EQ(scaler_a.get_scale(), scaler_b.get_scale()) << "after step " << step + 1;
  }
  EXPECT_EQ(skipped, mode == Mode::kFp16Scaler ? 1 : 0);
  // The parameters must have moved: a broken update that changes nothing would also compare equal.
  const std::vector<float> start = values(make_model(40)->parameters()[0].to(dtype));
  EXPECT_NE(values(b->parameters()[0]), start);
  // Every rank holds the same parameters.
  const std::vector<float> mine = values(b->parameters()[2]);
  const mt::Tensor flat = mt::from_vector(mine, {static_cast<int64_t>(mine.size())});
  world.broadcast(flat, 0);
  EXPECT_EQ(flat.to_vector<float>(), mine);

  expect_same_state(zero.state_dict(), plain.state_dict());
  // The state (masters and moments) is sharded: about 1/N per rank, never more than one element over.
  const double ratio =
      static_cast<double>(zero.state_bytes().total()) / static_cast<double>(plain.state_bytes().total());
  EXPECT_LE(ratio, 1.0 / world.size() + 1.0 / kElements) << "state bytes " << zero.state_bytes().total() << " vs "
                                                     << plain.state_bytes().total();
  if (world.size() == 2) EXPECT_LE(ratio, 0.55);
  if (out != nullptr) {
    out->weights.clear();
    for (const mt::Tensor& p : b->parameters()) out->weights.push_back(values(p));
    out->path = zero.gather_path();
    out->backend = zero.gather_backend();
    out->chunk = 0;
    for (int r = 0; r < world.size(); ++r) {
      const auto range = zero.owned_range(r);
      out->chunk = std::max(out->chunk, range.second - range.first);
    }
  }
}

TEST(ZeroMpi, FollowsDdpBitForBit) {
  MT_REQUIRE_SEVERAL_RANKS("mpi:zero_2, mpi:zero_3");
  for (Mode mode : {Mode::kFp32, Mode::kBf16, Mode::kFp16Scaler, Mode::kBf16Stochastic}) {
    SCOPED_TRACE(mode_name(mode));
    follow_ddp(mode, mt::kCPU);
  }
}

// A model built on the CPU and moved to the checked device (the default device left alone): the
// owned views, the updates and the all-gather work on device tensors.
TEST(ZeroMpi, FollowsDdpOnADevice) {
  MT_REQUIRE_SEVERAL_RANKS("mpi:zero_2, mpi:zero_3");
  ASSERT_EQ(mt::default_device(), mt::Device{});
  for (Mode mode : {Mode::kFp32, Mode::kBf16}) {
    SCOPED_TRACE(mode_name(mode));
    follow_ddp(mode, mt::testing::checked_device());
  }
}

TEST(ZeroMpi, TheRangesTileTheModel) {
  MT_REQUIRE_SEVERAL_RANKS("mpi:zero_2, mpi:zero_3");
  auto m = make_model(8);
  dist::ZeroRedundancyOptimizer zero(named(*m), dist::world(), adamw());
  int64_t next = 0;
  for (int r = 0; r < dist::world().size(); ++r) {
    const auto [b, e] = zero.owned_range(r);
    EXPECT_EQ(b, next);
    EXPECT_GE(e - b, kElements / dist::world().size());
    EXPECT_LE(e - b, kElements / dist::world().size() + 1);
    next = e;
  }
  EXPECT_EQ(next, kElements);
  EXPECT_MT_ERROR(zero.owned_range(dist::world().size()), "is not in a group of");
}

TEST(ZeroMpi, RanksWithDifferentModelsAreRefused) {
  MT_REQUIRE_SEVERAL_RANKS("mpi:zero_2, mpi:zero_3");
  mt::manual_seed(1);
  auto m = std::make_shared<mt::nn::Sequential>(mt::nn::Linear(6, dist::world().rank() == 0 ? 16 : 17));
  EXPECT_MT_ERROR(dist::ZeroRedundancyOptimizer(named(*m), dist::world(), adamw()),
                  "ZeroRedundancyOptimizer: rank 1's parameters differ from rank 0's", "0.weight");
}

// ---- the all-gather's path (docs/distributed.md, "Models on a device"): device collectives registered
// for the checked device that stage each tensor through the host and the process group
// (support/host_staged_collectives.h), so that the device path runs without a GPU.

using mt::testing::HostStagedCollectives;
using mt::testing::RegisteredForChecked;

TEST(ZeroDevice, ForcedDeviceCollectivesAreTakenByAGroupOfOne) {
  auto group = dist::make_single_process_group();
  HostStagedCollectives collectives(*group);
  RegisteredForChecked registered(&collectives);
  const mt::Device device = mt::testing::checked_device();
  auto a = make_model(9), b = make_model(9);
  b->to(device);
  mt::optim::AdamW plain(named(*a), kAdam);
  dist::ZeroRedundancyOptimizer zero(named(*b), *group, adamw(), {.gather = dist::ReductionPath::kDeviceCollectives});
  EXPECT_EQ(zero.options().gather, dist::ReductionPath::kDeviceCollectives);
  EXPECT_EQ(zero.gather_path(), dist::ReductionPath::kDeviceCollectives);
  EXPECT_EQ(zero.gather_backend(), "host-staged (test)");
  EXPECT_EQ(collectives.ids_made, 1);
  ASSERT_EQ(collectives.connected_ids.size(), 1u);
  EXPECT_EQ(collectives.connected_ids[0], mt::testing::host_staged_id());
  collectives.events.clear();
  mt::Generator g(10);
  const mt::Tensor x = mt::randn({8, 6}, {}, &g), y = mt::randint(0, 3, {8}, {.dtype = mt::kInt64}, &g);
  for (int step = 0; step < 3; ++step) {
    plain.zero_grad();
    F::cross_entropy((*a)(x), y).backward();
    plain.step();
    zero.zero_grad();
    F::cross_entropy((*b)(x.to(device)), y.to(device)).backward();
    zero.step();
  }
  const auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(values(pa[i]), values(pb[i])) << i;
  const auto gathers = collectives.of_kind("all_gather");
  EXPECT_EQ(gathers.size(), 3u) << "one per step";
  for (const mt::testing::CollectiveEvent& e : gathers) {
    EXPECT_EQ(e.numel, kElements);
    EXPECT_EQ(e.dtype, mt::kFloat32);
    EXPECT_FALSE(e.in_backward);
  }
  EXPECT_EQ(collectives.events.size(), gathers.size()) << "nothing but the all-gathers";
}

TEST(ZeroDevice, AutoStaysOnTheProcessGroupWithOneRankOrWhenForced) {
  auto group = dist::make_single_process_group();
  HostStagedCollectives collectives(*group);
  RegisteredForChecked registered(&collectives);
  auto m = make_model(11);
  m->to(mt::testing::checked_device());
  for (dist::ReductionPath wanted : {dist::ReductionPath::kAuto, dist::ReductionPath::kProcessGroup}) {
    SCOPED_TRACE(dist::to_string(wanted));
    dist::ZeroRedundancyOptimizer zero(named(*m), *group, adamw(), {.gather = wanted});
    EXPECT_EQ(zero.gather_path(), dist::ReductionPath::kProcessGroup);
    EXPECT_EQ(zero.gather_backend(), "single");
  }
  auto cpu = make_model(11);
  dist::ZeroRedundancyOptimizer zero(named(*cpu), *group, adamw());  // the three-argument form: auto
  EXPECT_EQ(zero.options().gather, dist::ReductionPath::kAuto);
  EXPECT_EQ(zero.gather_path(), dist::ReductionPath::kProcessGroup);
  EXPECT_EQ(collectives.ids_made, 0);
  EXPECT_TRUE(collectives.events.empty()) << "no communicator was connected";
}

TEST(ZeroDevice, RequiredDeviceCollectivesAreRefusedWhereThereAreNone) {
  auto group = dist::make_single_process_group();
  const dist::ZeroOptions required{.gather = dist::ReductionPath::kDeviceCollectives};
  auto cpu = make_model(12);
  EXPECT_MT_ERROR(dist::ZeroRedundancyOptimizer(named(*cpu), *group, adamw(), required), "ZeroRedundancyOptimizer",
                  "gather = device collectives", "parameters are on the cpu");
  auto m = make_model(12);
  m->to(mt::testing::checked_device());
  ASSERT_EQ(mt::device_collectives(mt::kChecked), nullptr);
  EXPECT_MT_ERROR(dist::ZeroRedundancyOptimizer(named(*m), *group, adamw(), required), "none for device type checked");
  // Parameters on two devices: device collectives gather on one, so only auto (the host) takes them.
  HostStagedCollectives collectives(*group);
  RegisteredForChecked registered(&collectives);
  const std::vector<mt::optim::NamedParameter> split = {
      {"on_cpu", mt::zeros({4}).requires_grad_()},
      {"on_device", mt::zeros({4}, {.device = mt::testing::checked_device()}).requires_grad_()}};
  EXPECT_MT_ERROR(dist::ZeroRedundancyOptimizer(split, *group, adamw(), required), "several devices");
  dist::ZeroRedundancyOptimizer zero(split, *group, adamw());
  EXPECT_EQ(zero.gather_path(), dist::ReductionPath::kProcessGroup);
  EXPECT_TRUE(collectives.events.empty());
}

// A model on the checked device with the device collectives registered: DDP and ZeRO-1 both take the
// device path (auto, several ranks). Every step's parameter all-gather goes through the communicator
// (one per step: one dtype; each rank's block is the longest shard; outside backward), and the weights
// follow DDP's after every step (follow_ddp) and end with the CPU run's bits, in fp32 and in bf16 with
// fp32 masters. Without the communicator's all-gather the other ranks' elements stay stale and it fails.
TEST(ZeroDeviceMpi, GathersThroughTheDeviceCollectivesToTheCpuRunsBits) {
  MT_REQUIRE_SEVERAL_RANKS("mpi:zero_2, mpi:zero_3");
  dist::ProcessGroup& world = dist::world();
  HostStagedCollectives collectives(world);
  for (Mode mode : {Mode::kFp32, Mode::kBf16}) {
    SCOPED_TRACE(mode_name(mode));
    Followed cpu, on_device;
    follow_ddp(mode, mt::kCPU, {}, &cpu);
    EXPECT_EQ(cpu.path, dist::ReductionPath::kProcessGroup);
    collectives.clear();
    {
      RegisteredForChecked registered(&collectives);
      follow_ddp(mode, mt::testing::checked_device(), {}, &on_device);
    }
    EXPECT_EQ(on_device.path, dist::ReductionPath::kDeviceCollectives);
    EXPECT_EQ(on_device.backend, "host-staged (test)");
    EXPECT_EQ(on_device.weights, cpu.weights);
    // Three communicators (the two DDPs' and ZeRO's), each id made on rank 0 only.
    EXPECT_EQ(collectives.of_kind("connect").size(), 3u);
    EXPECT_EQ(collectives.ids_made, world.rank() == 0 ? 3 : 0);
    const auto gathers = collectives.of_kind("all_gather");
    EXPECT_EQ(gathers.size(), 20u) << "one per step";
    for (const mt::testing::CollectiveEvent& e : gathers) {
      EXPECT_EQ(e.numel, on_device.chunk);
      EXPECT_EQ(e.dtype, mode == Mode::kFp32 ? mt::kFloat32 : mt::kBFloat16);
      EXPECT_FALSE(e.in_backward);
    }
  }
}

// The step's transfers between the checked device and the host: on the device path only the test
// communicator's own staging (one copy each way per all-gather: NCCL would make none), on the host
// path a copy of every owned slice to the host and of every other rank's slice back.
TEST(ZeroDeviceMpi, TheDevicePathCopiesNothingThroughTheHostItself) {
  MT_REQUIRE_SEVERAL_RANKS("mpi:zero_2, mpi:zero_3");
  dist::ProcessGroup& world = dist::world();
  HostStagedCollectives collectives(world);
  RegisteredForChecked registered(&collectives);
  const mt::Device device = mt::testing::checked_device();
  mt::Generator g(13);
  const mt::Tensor x = mt::randn({4, 6}, {}, &g).to(device);
  const mt::Tensor y = mt::randint(0, 3, {4}, {.dtype = mt::kInt64}, &g).to(device);
  for (dist::ReductionPath wanted : {dist::ReductionPath::kAuto, dist::ReductionPath::kProcessGroup}) {
    SCOPED_TRACE(dist::to_string(wanted));
    auto m = make_model(14);
    m->to(device);
    dist::ZeroRedundancyOptimizer zero(named(*m), world, adamw(), {.gather = wanted});
    zero.zero_grad();
    F::cross_entropy((*m)(x), y).backward();
    const size_t gathers = collectives.of_kind("all_gather").size();
    const mt::SyncCounts before = mt::sync_counts(device);
    zero.step();
    const mt::SyncCounts after = mt::sync_counts(device);
    const int64_t to_host = after.to_host - before.to_host, from_host = after.from_host - before.from_host;
    const auto staged = static_cast<int64_t>(collectives.of_kind("all_gather").size() - gathers);
    if (wanted == dist::ReductionPath::kAuto) {
      EXPECT_EQ(zero.gather_path(), dist::ReductionPath::kDeviceCollectives);
      EXPECT_EQ(staged, 1);
      EXPECT_EQ(to_host, staged);
      EXPECT_EQ(from_host, staged);
    } else {
      EXPECT_EQ(zero.gather_path(), dist::ReductionPath::kProcessGroup);
      EXPECT_EQ(staged, 0);
      EXPECT_GE(to_host, 1);
      EXPECT_GE(from_host, 1);
    }
  }
}

TEST(ZeroDeviceMpi, ForcingTheProcessGroupLeavesTheDeviceCollectivesUnused) {
  MT_REQUIRE_SEVERAL_RANKS("mpi:zero_2, mpi:zero_3");
  dist::ProcessGroup& world = dist::world();
  HostStagedCollectives collectives(world);
  Followed host;
  {
    RegisteredForChecked registered(&collectives);
    follow_ddp(Mode::kFp32, mt::testing::checked_device(), {.gather = dist::ReductionPath::kProcessGroup}, &host);
  }
  EXPECT_EQ(host.path, dist::ReductionPath::kProcessGroup);
  EXPECT_EQ(host.backend, world.backend_name());
  EXPECT_TRUE(collectives.of_kind("all_gather").empty());
  EXPECT_EQ(collectives.of_kind("connect").size(), 2u) << "the two DDPs' only";
}

TEST(ZeroDeviceMpi, RanksThatWouldTakeDifferentPathsAreRefusedOnEveryRank) {
  MT_REQUIRE_SEVERAL_RANKS("mpi:zero_2, mpi:zero_3");
  dist::ProcessGroup& world = dist::world();
  HostStagedCollectives collectives(world);
  RegisteredForChecked registered(&collectives);
  auto m = make_model(15);
  m->to(mt::testing::checked_device());
  const dist::ReductionPath wanted =
      world.rank() == 1 ? dist::ReductionPath::kProcessGroup : dist::ReductionPath::kAuto;
  EXPECT_MT_ERROR(dist::ZeroRedundancyOptimizer(named(*m), world, adamw(), {.gather = wanted}),
                  "ZeroRedundancyOptimizer", "rank 1 gathers through process group",
                  "rank 0 through device collectives");
  EXPECT_TRUE(collectives.events.empty()) << "no communicator was connected";
  world.barrier();  // every rank got here: none waits in a collective another skipped
}

}  // namespace
