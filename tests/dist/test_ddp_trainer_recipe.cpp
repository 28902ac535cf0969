// The language-model recipe under data parallelism (CTest's mpi:ddp runs the DdpMpi* suites under
// `mpirun -np 2`): gradient accumulation reduces once per step and equals one process on the whole
// global batch, ZeRO-1 with accumulation is DDP with accumulation bit for bit, and the clipped norm
// is the averaged gradient's, the same on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "dist/dist_fixtures.h"
#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;
namespace tr = mixtrain::train;
namespace dist = mixtrain::dist;

namespace {

#define MT_REQUIRE_TWO_RANKS() MT_REQUIRE_SEVERAL_RANKS("mpi:ddp")

const mt::data::SyntheticDataset& data() {
  static const mt::data::SyntheticDataset ds(320, {6}, 3, /*seed=*/12);
  return ds;
}

struct RunResult {
  std::vector<std::vector<float>> params;
  std::vector<double> norms;  // StepInfo::grad_norm
  std::vector<int64_t> samples;
};

struct Spec {
  int64_t batch = 8;
  int64_t accumulation = 1;
  bool distributed = true;  // over mt::dist::world(); else one process
  int zero = 0;
  std::optional<double> clip;
  tr::Precision precision = tr::Precision::kFp32;
};

RunResult train(const Spec& s) {
  auto model = mt::testing::small_mlp(31);
  tr::TrainerOptions o;
  o.precision = {.precision = s.precision};
  o.batch_size = s.batch;
  o.accumulation_steps = s.accumulation;
  o.max_steps = 10;
  o.seed = 2;
  o.prefetch = 0;
  o.process_group = s.distributed ? &dist::world() : nullptr;
  o.zero_stage = s.zero;
  o.clip_grad_norm = s.clip;
  RunResult r;
  o.on_step = [&](const tr::StepInfo& i) {
    if (i.grad_norm) r.norms.push_back(*i.grad_norm);
    r.samples.push_back(i.samples);
  };
  tr::Trainer trainer(*model, tr::adamw(1e-2, 0.01), data(), nullptr, o);
  trainer.fit();
  for (const mt::Tensor& p : model->parameters()) r.params.push_back(p.to(mt::kFloat32).contiguous().to_vector<float>());
  return r;
}

// ||a - b|| / ||b|| over every parameter (the DDP suites' measure: sums in another order).
double relative_difference(const RunResult& a, const RunResult& b) {
  double diff = 0, norm = 0;
  for (size_t t = 0; t < b.params.size(); ++t)
    for (size_t i = 0; i < b.params[t].size(); ++i) {
      const double d = double(a.params[t][i]) - double(b.params[t][i]);
      diff += d * d;
      norm += double(b.params[t][i]) * b.params[t][i];
    }
  const double r = std::sqrt(diff / norm);
  return std::isnan(r) ? INFINITY : r;
}

}  // namespace

TEST(DdpMpiTrainerRecipe, AccumulationOverRanksIsOneProcessOnTheGlobalBatch) {
  MT_REQUIRE_TWO_RANKS();
  const int64_t world = dist::world().size();
  const RunResult ddp = train({.batch = 8, .accumulation = 2});
  const RunResult one = train({.batch = 8 * 2 * world, .distributed = false});
  EXPECT_EQ(ddp.samples, std::vector<int64_t>(10, 16 * world));  // every rank's micro-batches
  // The same fp32 sums in another order (per micro-batch, per rank, then over ranks): the DDP
  // suites' bound for that, 1e-5 of the model's norm (measured here: below 1e-6).
  EXPECT_LE(relative_difference(ddp, one), 1e-5);
  // Accumulation is not a no-op: one micro-batch per step gives other weights.
  EXPECT_GT(relative_difference(train({.batch = 8}), one), 1e-3);
}

TEST(DdpMpiTrainerRecipe, ZeroWithAccumulationIsDdpWithAccumulationBitForBit) {
  MT_REQUIRE_TWO_RANKS();
  for (const tr::Precision p : {tr::Precision::kFp32, tr::Precision::kFp16}) {
    SCOPED_TRACE(std::string(tr::to_string(p)));
    const RunResult ddp = train({.accumulation = 3, .clip = 0.5, .precision = p});
    const RunResult zero = train({.accumulation = 3, .zero = 1, .clip = 0.5, .precision = p});
    ASSERT_EQ(zero.params.size(), ddp.params.size());
    for (size_t t = 0; t < ddp.params.size(); ++t) EXPECT_EQ(zero.params[t], ddp.params[t]) << "tensor " << t;
    EXPECT_EQ(zero.norms, ddp.norms);
  }
}

TEST(DdpMpiTrainerRecipe, TheClippedNormIsTheAveragedGradientsOnEveryRank) {
  MT_REQUIRE_TWO_RANKS();
  dist::ProcessGroup& g = dist::world();
  const RunResult ddp = train({.batch = 8, .accumulation = 2, .clip = 0.05});
  const RunResult one = train({.batch = 8 * 2 * g.size(), .distributed = false, .clip = 0.05});
  ASSERT_EQ(ddp.norms.size(), 10u);
  for (size_t s = 0; s < ddp.norms.size(); ++s) {
    // Every rank's report, in full precision, is the same number.
    char text[64];
    std::snprintf(text, sizeof text, "%.17g", ddp.norms[s]);
    for (const std::string& other : g.all_gather(std::string(text))) EXPECT_EQ(other, text) << "step " << s + 1;
    // And it is the norm of the whole global batch's gradient, not of a rank's share.
    // Weights that differ at fp32 rounding (above) give norms within 1e-4 after 10 clipped steps.
    EXPECT_NEAR(ddp.norms[s], one.norms[s], 1e-4 * one.norms[s]) << "step " << s + 1;
    EXPECT_GT(ddp.norms[s], 0.05) << "clipping must act for the test to mean something";
  }
}
