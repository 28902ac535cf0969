// bf16 parameters updated without fp32 masters (mode (d) of optim/optimizer.h): stochastic rounding
// and Kahan compensation (AdamOptions::bf16_update), the stochastically rounded bf16 second moment,
// their reproducibility, state dicts and byte accounting.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/optim.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/optim/adam.h"
#include "support/cpu_env.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
namespace optim = mixtrain::optim;
using optim::Bf16Update;

namespace {

mt::Tensor bf16_leaf(const std::vector<float>& v) {
  mt::Tensor t = mt::from_vector(v, {static_cast<int64_t>(v.size())}, {.dtype = mt::kBFloat16});
  t.requires_grad_();
  return t;
}

double mean(const std::vector<float>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// n parameters at 1.0 trained by AdamW (no weight decay) for `steps` steps on a constant gradient of
// 1: each step moves a weight by lr (m / sqrt(v) = 1 once bias-corrected), here far below half a bf16
// ulp of 1 (2^-9).
struct TinyUpdates {
  int64_t n = 1 << 14;
  int steps = 50;
  double lr = 1e-4;
  optim::AdamOptions options(Bf16Update mode, uint64_t seed = 0) const {
    return {.lr = lr, .weight_decay = 0.0, .master_weights = false, .bf16_update = mode, .rounding_seed = seed};
  }
  std::vector<float> run(Bf16Update mode, uint64_t seed = 0, int threads = 1) const {
    return mt::testing::with_threads(threads, [&] {
      mt::Tensor p = bf16_leaf(std::vector<float>(static_cast<size_t>(n), 1.0f));
      optim::AdamW opt({p}, options(mode, seed));
      for (int t = 0; t < steps; ++t) {
        p.set_grad(mt::ones({n}, {.dtype = mt::kBFloat16}));
        opt.step();
      }
      return p.to_vector<float>();
    });
  }
  // The fp32 trajectory of the same run, one weight (they are all equal).
  float fp32() const {
    mt::Tensor p = mt::ones({1});
    p.requires_grad_();
    optim::AdamW opt({p}, {.lr = lr, .weight_decay = 0.0});
    for (int t = 0; t < steps; ++t) {
      p.set_grad(mt::ones({1}));
      opt.step();
    }
    return p.to_vector<float>()[0];
  }
};

}  // namespace

TEST(StochasticRounding, ExactlyUnbiasedOverAllRandomBits) {
  // For each input, the mean of the rounded value over all 2^16 random words is the input exactly
  // (rounding up happens for exactly `low 16 bits` of the words): the definition of unbiased.
  const float inputs[] = {1.0f + 0x1.0p-9f, -3.14159f, 1e-30f, 0x1.fffffep+127f / 2, 0.1f, -0.0f, 1.5f};
  for (float f : inputs) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    const uint16_t down = static_cast<uint16_t>(u >> 16);
    int64_t ups = 0;
    for (uint32_t r = 0; r < 65536; ++r) {
      const uint16_t b = mt::kernels::bf16_bits_stochastic(f, static_cast<uint16_t>(r));
      ASSERT_TRUE(b == down || b == down + 1) << f << " " << r;
      ups += b != down;
    }
    EXPECT_EQ(ups, static_cast<int64_t>(u & 0xffffu)) << f;
  }
  // Special values: bf16 values and infinities stay, NaN stays NaN (quiet), the largest finite
  // values may round up to inf (the next bf16 up).
  EXPECT_EQ(mt::kernels::bf16_bits_stochastic(INFINITY, 0xffff), 0x7f80);
  EXPECT_EQ(mt::kernels::bf16_bits_stochastic(-INFINITY, 0xffff), 0xff80);
  EXPECT_EQ(mt::kernels::bf16_bits_stochastic(std::bit_cast<float>(0x7f800001u), 0), 0x7fc0);
  EXPECT_EQ(mt::kernels::bf16_bits_stochastic(std::bit_cast<float>(0x7f7fffffu), 1), 0x7f80);
  EXPECT_EQ(mt::kernels::bf16_bits_stochastic(2.0f, 0xffff), 0x4000);
}

TEST(Bf16Update, NearestLosesTinyUpdatesStochasticAndKahanKeepThem) {
  const TinyUpdates run;
  const float want = run.fp32();  // 1 - 50 * 1e-4 = 0.995 (up to fp32 rounding)
  ASSERT_NEAR(want, 0.995f, 1e-5f);
  // Round to nearest: every update is below half an ulp; the weights never move.
  for (float v : run.run(Bf16Update::kNearest)) ASSERT_EQ(v, 1.0f);
  // Stochastic: each weight is a random walk on the bf16 grid (ulp 2^-8 below 1) whose expectation is
  // the fp32 trajectory; the mean of 2^14 of them lies within 6 standard errors (one weight's
  // standard deviation is at most one ulp).
  const std::vector<float> sr = run.run(Bf16Update::kStochastic, 7);
  const double stderr_bound = 0x1.0p-8 / std::sqrt(static_cast<double>(run.n));
  EXPECT_NEAR(mean(sr), want, 6 * stderr_bound);
  EXPECT_GT(std::count_if(sr.begin(), sr.end(), [](float v) { return v != 1.0f; }), run.n / 2);
  // Kahan: every weight is the fp32 trajectory rounded to bf16 (the compensation carries the rest).
  for (float v : run.run(Bf16Update::kKahan)) ASSERT_EQ(v, static_cast<float>(mt::bfloat16(want)));
}

TEST(Bf16Update, StochasticRoundingIsReproducibleAndThreadCountIndependent) {
  TinyUpdates run;
  run.n = 3 * 16384 + 1000 + 3;  // several chunks of the multi-tensor kernel and a ragged tail
  run.steps = 5;
  const std::vector<float> a = run.run(Bf16Update::kStochastic, 11, 1);
  EXPECT_EQ(a, run.run(Bf16Update::kStochastic, 11, 2));
  EXPECT_EQ(a, run.run(Bf16Update::kStochastic, 11, 1));
  EXPECT_NE(a, run.run(Bf16Update::kStochastic, 12, 1));  // another seed draws other bits
  // The AVX2 Philox (8 blocks at once) draws the scalar generator's bits.
  for (mt::cpu::Isa level : mt::cpu::kAllIsas) {
    if (level > mt::cpu::detected_isa()) continue;
    mt::cpu::MaxIsaGuard cap(level);
    EXPECT_EQ(a, run.run(Bf16Update::kStochastic, 11, 2)) << mt::cpu::to_string(level);
  }
}

// The vector kernels run every layout of the update with the operations and random bits of the
// portable loops: weights, moments and the Kahan compensation agree bit for bit at every ISA level,
// on random values (with weight decay, AMSGrad, an inf and a NaN gradient) and a ragged length.
TEST(Bf16Update, EveryIsaLevelGivesThePortableBits) {
  struct Mode {
    Bf16Update update;
    mt::DType m, v;
    bool amsgrad;
  };
  const std::vector<Mode> modes = {{Bf16Update::kStochastic, mt::kBFloat16, mt::kBFloat16, false},
                                   {Bf16Update::kStochastic, mt::kFloat32, mt::kFloat32, true},
                                   {Bf16Update::kKahan, mt::kBFloat16, mt::kBFloat16, false},
                                   {Bf16Update::kKahan, mt::kFloat32, mt::kFloat32, false},
                                   {Bf16Update::kNearest, mt::kBFloat16, mt::kBFloat16, true}};
  const int64_t n = 4 * 32 * 41 + 29;
  auto run = [&](const Mode& mode) {
    mt::Generator gen(3);
    mt::Tensor p = mt::randn({n}, {}, &gen).to(mt::kBFloat16);
    p.requires_grad_();
    optim::AdamW opt({p}, {.lr = 1e-3, .weight_decay = 0.1, .amsgrad = mode.amsgrad, .master_weights = false,
                           .exp_avg_dtype = mode.m, .exp_avg_sq_dtype = mode.v, .bf16_update = mode.update,
                           .rounding_seed = 9});
    for (int step = 0; step < 4; ++step) {
      std::vector<float> g = (mt::randn({n}, {}, &gen) * 0.01).to_vector<float>();
      if (step == 2) g[5] = std::numeric_limits<float>::infinity(), g[77] = std::nanf("");
      p.set_grad(mt::from_vector(g, {n}).to(mt::kBFloat16));
      opt.step();
    }
    // Every value as its fp32 bit pattern (bf16 widens exactly; NaN payloads are kept).
    std::vector<std::vector<uint32_t>> out;
    const mt::optim::ParamState& st = opt.state(0);
    for (const mt::Tensor& t : {p.detach(), st.exp_avg, st.exp_avg_sq, st.kahan_comp.defined() ? st.kahan_comp : mt::zeros({1})}) {
      out.emplace_back();
      for (float f : t.to(mt::kFloat32).to_vector<float>()) out.back().push_back(std::bit_cast<uint32_t>(f));
    }
    return out;
  };
  for (const Mode& mode : modes) {
    SCOPED_TRACE(testing::Message() << "mode " << static_cast<int>(mode.update) << " m " << mode.m << " v " << mode.v);
    std::vector<std::vector<uint32_t>> portable;
    {
      mt::cpu::MaxIsaGuard cap(mt::cpu::Isa::kGeneric);
      portable = run(mode);
    }
    for (mt::cpu::Isa level : mt::cpu::kAllIsas) {
      if (level == mt::cpu::Isa::kGeneric || level > mt::cpu::detected_isa()) continue;
      mt::cpu::MaxIsaGuard cap(level);
      EXPECT_EQ(run(mode), portable) << mt::cpu::to_string(level);
    }
  }
}

TEST(Bf16Update, Bf16SecondMomentFollowsTheGradientScaleOnAverage) {
  // The stall of test_compact_state.cpp (v settled at 1, g^2 jumps to 4) with the optimizer's own
  // stochastically rounded bf16 v: v must move toward 4 like the fp32 moment does.
  const int64_t n = 4096;
  const int steps = 300;
  auto run = [&](mt::DType v_dtype) {
    mt::Tensor p = mt::zeros({n});
    p.requires_grad_();
    optim::AdamW opt({p}, {.lr = 0.0, .exp_avg_sq_dtype = v_dtype, .rounding_seed = 3});
    optim::OptimizerStateDict sd = opt.state_dict();
    sd.state[0].step = 1000;
    sd.state[0].exp_avg = mt::ones({n});
    sd.state[0].exp_avg_sq = mt::ones({n}).to(v_dtype);
    opt.load_state_dict(sd);
    for (int t = 0; t < steps; ++t) {
      p.set_grad(mt::full({n}, 2.0));
      opt.step();
    }
    EXPECT_EQ(opt.state(0).exp_avg_sq.dtype(), v_dtype);
    return mean(opt.state(0).exp_avg_sq.to_vector<float>());
  };
  const double v32 = run(mt::kFloat32);  // 4 - 3 * 0.999^300 = 1.78
  ASSERT_NEAR(v32, 4.0 - 3.0 * std::pow(0.999, steps), 1e-3);
  EXPECT_NEAR(run(mt::kBFloat16), v32, 0.01);  // nearest rounding would leave it at 1.0
}

TEST(Bf16Update, StateDictRoundTripContinuesTheSameTrajectory) {
  // Kahan compensation and bf16 moments are state: a run saved after 3 steps and restored into a
  // fresh optimizer continues bit for bit (the stochastic bits depend on the step count, restored).
  for (Bf16Update mode : {Bf16Update::kStochastic, Bf16Update::kKahan}) {
    SCOPED_TRACE(optim::to_string(mode));
    const int64_t n = 300;
    std::vector<float> init(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) init[static_cast<size_t>(i)] = std::sin(0.3f * static_cast<float>(i));
    const optim::AdamOptions o{.lr = 3e-4,
                               .master_weights = false,
                               .exp_avg_dtype = mt::kBFloat16,
                               .exp_avg_sq_dtype = mt::kBFloat16,
                               .bf16_update = mode,
                               .rounding_seed = 5};
    auto grad = [&](int t) {
      std::vector<float> g(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) g[static_cast<size_t>(i)] = std::cos(0.7f * static_cast<float>(i) + t);
      return mt::from_vector(g, {n}, {.dtype = mt::kBFloat16});
    };
    mt::Tensor p = bf16_leaf(init);
    optim::AdamW opt({p}, o);
    optim::OptimizerStateDict saved;
    std::vector<float> saved_p;
    for (int t = 0; t < 6; ++t) {
      if (t == 3) saved = opt.state_dict(), saved_p = p.to_vector<float>();
      p.set_grad(grad(t));
      opt.step();
    }
    if (mode == Bf16Update::kKahan) {
      ASSERT_TRUE(saved.state[0].kahan_comp.defined());
      EXPECT_EQ(saved.state[0].kahan_comp.dtype(), mt::kBFloat16);
    } else {
      EXPECT_FALSE(saved.state[0].kahan_comp.defined());
    }
    mt::Tensor q = bf16_leaf(saved_p);
    optim::AdamW resumed({q}, o);
    resumed.load_state_dict(saved);
    for (int t = 3; t < 6; ++t) {
      q.set_grad(grad(t));
      resumed.step();
    }
    EXPECT_EQ(q.to_vector<float>(), p.to_vector<float>());
    // A compensation cannot be loaded for a parameter that has a master.
    mt::Tensor r = bf16_leaf(saved_p);
    optim::AdamW with_master({r}, {.lr = 3e-4});
    optim::OptimizerStateDict bad = saved;
    bad.state[0].master = mt::zeros({n});
    if (mode == Bf16Update::kKahan)
      EXPECT_MT_ERROR(with_master.load_state_dict(bad), "kahan_comp", "without a master");
  }
}

TEST(Bf16Update, ModelStateBytesPerParameter) {
  const int64_t n = 1000;
  auto bytes = [&](optim::AdamOptions o) {
    mt::Tensor p = bf16_leaf(std::vector<float>(static_cast<size_t>(n), 0.5f));
    optim::AdamW opt({p}, o);
    p.set_grad(mt::ones({n}, {.dtype = mt::kBFloat16}));
    opt.step();
    return opt.model_state_bytes().bytes_per_param();
  };
  const optim::AdamOptions sr{.master_weights = false,
                              .exp_avg_dtype = mt::kBFloat16,
                              .exp_avg_sq_dtype = mt::kBFloat16,
                              .bf16_update = Bf16Update::kStochastic};
  EXPECT_EQ(bytes(sr), 8.0);  // weights 2, grads 2, m 2, v 2
  optim::AdamOptions kahan = sr;
  kahan.bf16_update = Bf16Update::kKahan;
  EXPECT_EQ(bytes(kahan), 10.0);  // + the compensation
  optim::AdamOptions kahan_v32 = kahan;
  kahan_v32.exp_avg_sq_dtype = mt::kFloat32;
  EXPECT_EQ(bytes(kahan_v32), 12.0);
}

TEST(Bf16Update, ReleaseMastersKeepsValuesAndSwitchesToInPlaceUpdates) {
  mt::Tensor p = bf16_leaf({1.0f, 2.0f, 3.0f});
  optim::AdamW opt({p}, {.lr = 1e-4, .weight_decay = 0.0});
  ASSERT_TRUE(opt.state(0).master.defined());
  opt.release_masters();
  opt.release_masters();  // idempotent
  EXPECT_FALSE(opt.state(0).master.defined());
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{1.0f, 2.0f, 3.0f}));
  p.set_grad(mt::ones({3}, {.dtype = mt::kBFloat16}));
  opt.step();  // round to nearest, no master: a 1e-4 update is lost
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{1.0f, 2.0f, 3.0f}));
  EXPECT_EQ(opt.state_bytes().masters, 0);
}

TEST(Bf16Update, InvalidOptionsAreErrors) {
  mt::Tensor p = bf16_leaf({1.0f});
  EXPECT_MT_ERROR(optim::AdamW({p}, {.exp_avg_sq_dtype = mt::kFloat16}), "exp_avg_sq_dtype must be float32 or bfloat16");
  EXPECT_MT_ERROR(optim::AdamW({p}, {.bf16_update = static_cast<Bf16Update>(7)}), "invalid bf16_update");
}
