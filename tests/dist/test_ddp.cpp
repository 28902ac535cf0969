// DistributedDataParallel: bucket assignment and single-process behaviour everywhere; under
// `mpirun -np 2` (CTest's mpi:ddp) the averaged gradients against one process on the whole batch,
// the initial broadcast, no_sync, unused parameters, and AMP across ranks with an inf injected on
// one rank only.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <vector>

#include "mixtrain/dist/ddp.h"
#include "mixtrain/dist/process_group.h"
#include "mixtrain/mixtrain.h"
#include "dist/dist_fixtures.h"
#include "support/checked_device.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
namespace dist = mixtrain::dist;

namespace {

#define MT_REQUIRE_TWO_RANKS() MT_REQUIRE_SEVERAL_RANKS("mpi:ddp")

using Data = mt::testing::DistBatch;
using mt::testing::full_batch;
using mt::testing::shard;
std::shared_ptr<mt::nn::Sequential> make_model(uint64_t seed) { return mt::testing::small_mlp(seed); }

// ||a - b|| / ||b||: sums of the same terms in another order (per rank, then over ranks) differ by
// fp32 rounding, which an element-wise ratio magnifies without bound near zero.
double max_rel_diff(const mt::Tensor& a, const mt::Tensor& b) {
  const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    diff += (va[i] - vb[i]) * (va[i] - vb[i]);
    norm += vb[i] * vb[i];
  }
  const double r = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
  return std::isnan(r) ? INFINITY : r;
}

// ---- one process
TEST(Ddp, BucketsHoldTheParametersInReverseOrderUpToTheCap) {
  auto group = dist::make_single_process_group();
  auto model = make_model(1);  // parameters: 0.weight 16x6, 0.bias 16, 2.weight 3x16, 2.bias 3
  // 240 fp32 bytes per bucket: 2.bias (12) + 2.weight (192) fit, 0.bias (64) starts the next one.
  dist::DistributedDataParallel ddp(*model, *group, {.bucket_cap_mb = 240.0 / (1024 * 1024)});
  EXPECT_EQ(ddp.bucket_assignment(), (std::vector<std::vector<int64_t>>{{3, 2}, {1}, {0}}));
  dist::DistributedDataParallel one(*model, *group, {});
  EXPECT_EQ(one.bucket_assignment(), (std::vector<std::vector<int64_t>>{{3, 2, 1, 0}}));
}

TEST(Ddp, OneProcessLeavesTheGradientsAsTheyAre) {
  auto group = dist::make_single_process_group();
  auto a = make_model(2), b = make_model(2);
  dist::DistributedDataParallel ddp(*a, *group, {.bucket_cap_mb = 0.0001});
  const Data d = full_batch(8);
  F::cross_entropy((*a)(d.x), d.y).backward();
  F::cross_entropy((*b)(d.x), d.y).backward();
  const auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(pa[i].grad().to_vector<float>(), pb[i].grad().to_vector<float>());
  EXPECT_EQ(ddp.stats().reductions, 1);
  EXPECT_EQ(ddp.stats().buckets_reduced, static_cast<int64_t>(ddp.bucket_assignment().size()));
}

TEST(Ddp, AParameterWithoutGradientIsNamed) {
  auto group = dist::make_single_process_group();
  auto model = make_model(3);
  dist::DistributedDataParallel ddp(*model, *group);
  const Data d = full_batch(4);
  // Only the first layer takes part: the second's parameters get no gradient.
  auto first = model->parameters();
  mt::Tensor loss = mt::sum(mt::linear(d.x, first[0], first[1]));
  loss.backward();
  EXPECT_MT_ERROR(ddp.finish_gradient_sync(), "no gradient", "2.weight", "find_unused_parameters");
  // With find_unused_parameters the used ones are reduced and the unused keep .grad untouched.
  auto other = make_model(3);
  dist::DistributedDataParallel tolerant(*other, *group, {.find_unused_parameters = true});
  auto p = other->parameters();
  mt::sum(mt::linear(d.x, p[0], p[1])).backward();
  tolerant.finish_gradient_sync();
  EXPECT_TRUE(p[0].grad().defined());
  EXPECT_FALSE(p[2].grad().defined()) << "a parameter no rank used keeps no gradient";
}

TEST(Ddp, AModelWithoutTrainableParametersIsRefused) {
  auto group = dist::make_single_process_group();
  mt::nn::Sequential empty{mt::nn::ReLU()};
  EXPECT_MT_ERROR(dist::DistributedDataParallel(empty, *group), "no parameter that requires a gradient");
}

// ---- two processes
TEST(DdpMpi, RankZerosWeightsAreEveryones) {
  MT_REQUIRE_TWO_RANKS();
  dist::ProcessGroup& g = dist::world();
  auto model = make_model(100 + g.rank());  // different on purpose
  dist::DistributedDataParallel ddp(*model, g);
  const auto reference = make_model(100);   // rank 0's
  const auto p = model->parameters(), q = reference->parameters();
  for (size_t i = 0; i < p.size(); ++i) EXPECT_EQ(p[i].to_vector<float>(), q[i].to_vector<float>());
}

TEST(DdpMpi, GradientsAreThoseOfOneProcessOnTheWholeBatch) {
  MT_REQUIRE_TWO_RANKS();
  dist::ProcessGroup& g = dist::world();
  for (double cap : {25.0, 100.0 / (1024 * 1024)}) {  // one bucket; one per parameter (overlapped)
    SCOPED_TRACE(cap);
    auto model = make_model(5);
    dist::DistributedDataParallel ddp(*model, g, {.bucket_cap_mb = cap});
    const Data all = full_batch(16);
    const Data mine = shard(all, g.rank(), g.size());
    F::cross_entropy((*model)(mine.x), mine.y).backward();
    auto single = make_model(5);
    F::cross_entropy((*single)(all.x), all.y).backward();
    const auto p = model->parameters(), q = single->parameters();
    for (size_t i = 0; i < p.size(); ++i) EXPECT_LE(max_rel_diff(p[i].grad(), q[i].grad()), 1e-5) << i;
    EXPECT_GT(ddp.stats().buckets_reduced, 0);
  }
}

TEST(DdpMpi, NoSyncAccumulatesLocallyAndTheNextBackwardReducesTheSum) {
  MT_REQUIRE_TWO_RANKS();
  dist::ProcessGroup& g = dist::world();
  auto model = make_model(6);
  dist::DistributedDataParallel ddp(*model, g);
  const Data a = full_batch(8), b = full_batch(12);
  {
    auto guard = ddp.no_sync();
    F::cross_entropy((*model)(shard(a, g.rank(), 2).x), shard(a, g.rank(), 2).y).backward();
  }
  EXPECT_EQ(ddp.stats().reductions, 0) << "nothing reduced inside no_sync";
  F::cross_entropy((*model)(shard(b, g.rank(), 2).x), shard(b, g.rank(), 2).y).backward();
  EXPECT_EQ(ddp.stats().reductions, 1);
  auto single = make_model(6);
  F::cross_entropy((*single)(a.x), a.y).backward();
  F::cross_entropy((*single)(b.x), b.y).backward();
  const auto p = model->parameters(), q = single->parameters();
  for (size_t i = 0; i < p.size(); ++i) EXPECT_LE(max_rel_diff(p[i].grad(), q[i].grad()), 1e-5) << i;
}

TEST(DdpMpi, AnInfOnOneRankMakesEveryRankSkipTheStep) {
  MT_REQUIRE_TWO_RANKS();
  dist::ProcessGroup& g = dist::world();
  auto model = make_model(7);
  dist::DistributedDataParallel ddp(*model, g);
  mt::optim::AdamW opt(model->parameters(), {.lr = 0.01});
  mt::amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 1});
  const Data d = shard(full_batch(8), g.rank(), g.size());
  std::vector<int64_t> skipped;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    mt::Tensor loss;
    {
      mt::amp::Autocast ac(mt::kCPU, mt::kBFloat16);
      loss = F::cross_entropy((*model)(d.x).to(mt::kFloat32), d.y);
    }
    if (step == 1 && g.rank() == 1) loss = loss * INFINITY;  // only rank 1 overflows
    scaler.scale(loss).backward();
    skipped.push_back(scaler.step(opt) ? 0 : 1);
    scaler.update();
  }
  EXPECT_EQ(skipped, (std::vector<int64_t>{0, 1, 0})) << "rank " << g.rank();
  // Every rank holds the same scale and the same weights.
  const std::vector<int64_t> scales = g.all_gather(static_cast<int64_t>(scaler.get_scale()));
  EXPECT_EQ(scales[0], scales[1]);
  EXPECT_EQ(scales[0], 1024 * 2 / 2 * 2) << "grown, backed off, grown";
  for (const mt::Tensor& p : model->parameters()) {
    const mt::Tensor mine = p.detach().clone(), theirs = p.detach().clone();
    g.broadcast(theirs, 0);
    EXPECT_EQ(mine.to_vector<float>(), theirs.to_vector<float>());
  }
}

// A model on the checked device (the GPU's stand-in, built on the CPU and moved, the default device
// left alone) trains data-parallel through host-staged buckets to the CPU model's bits: fp32, bf16
// autocast, and fp16 autocast with the GradScaler, over 3 AdamW steps each.
TEST(DdpMpi, ADeviceModelTrainsToTheCpuModelsBits) {
  MT_REQUIRE_TWO_RANKS();
  dist::ProcessGroup& g = dist::world();
  const mt::Device device = mt::testing::checked_device();
  ASSERT_EQ(mt::default_device(), mt::Device{});
  const Data d = shard(full_batch(16), g.rank(), g.size());
  for (std::optional<mt::DType> amp : {std::optional<mt::DType>{}, std::optional<mt::DType>{mt::kBFloat16},
                                       std::optional<mt::DType>{mt::kFloat16}}) {
    SCOPED_TRACE(amp ? std::string(mt::to_string(*amp)) : "fp32");
    auto train = [&](const mt::Device& where) {
      auto model = make_model(30 + g.rank());  // differs per rank: the broadcast makes it rank 0's
      model->to(where);
      dist::DistributedDataParallel ddp(*model, g, {.bucket_cap_mb = 100.0 / (1024 * 1024)});
      mt::optim::AdamW opt(model->parameters(), {.lr = 0.01});
      mt::amp::GradScaler scaler({.enabled = amp == mt::kFloat16});
      return mt::testing::train_amp_steps(*model, opt, scaler, d, where, amp, 3);
    };
    EXPECT_EQ(train(device), train(mt::kCPU));
  }
}

}  // namespace
