// Compact optimizer state: packed fp32 masters for bf16 parameters (mode (c) of optim/optimizer.h)
// and a bf16 first moment, the model-state byte accounting, the state-dict format they share with
// full masters, and the vector Adam kernels against the portable one. Why a bf16 second moment
// rounded to nearest would stall is shown here too (test_bf16_update.cpp: stochastic rounding).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <functional>
#include <memory>

#include "kernels/elementwise.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/optim/adam.h"
#include "mixtrain/optim/sgd.h"
#include "support/cpu_env.h"
#include "support/expect_error.h"
#include "support/checked_device.h"

namespace mt = mixtrain;
namespace optim = mixtrain::optim;

namespace {

mt::Tensor leaf(mt::Tensor t) {
  t.requires_grad_();
  return t;
}

std::vector<float> values(int64_t n, int seed, double scale = 0.8) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + seed) * scale);
  return v;
}

std::vector<float> rounded(const std::vector<float>& v, mt::DType dtype) {
  return mt::from_vector(v, {static_cast<int64_t>(v.size())}, {.dtype = dtype}).to_vector<float>();
}

// The bf16 value whose bits are the upper half of x (truncation toward zero).
float truncated_bf16(float x) { return std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0xffff0000u); }

// The bf16-rounded fp32 value (round to nearest even).
float nearest_bf16(float x) { return static_cast<float>(mt::bfloat16(x)); }

}  // namespace

TEST(CompactState, PackedMasterFollowsTheFp32TrajectoryBitForBit) {
  // The packed master is an fp32 value: it takes exactly the fp32 path; the bf16 parameter holds its
  // upper half. Several chunks, a tail, and values that round up (so truncation really differs).
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(const mt::Tensor&, bool packed)>;
  const std::vector<std::pair<const char*, Factory>> kinds = {
      {"AdamW amsgrad",
       [](const mt::Tensor& p, bool packed) {
         return std::make_unique<optim::AdamW>(
             std::vector<mt::Tensor>{p}, optim::AdamOptions{.lr = 1e-2, .amsgrad = true, .packed_master = packed});
       }},
      {"SGD nesterov",
       [](const mt::Tensor& p, bool packed) {
         return std::make_unique<optim::SGD>(
             std::vector<mt::Tensor>{p},
             optim::SGDOptions{
                 .lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true, .packed_master = packed});
       }},
  };
  for (const auto& [kind, make] : kinds) {
    SCOPED_TRACE(kind);
    const int64_t n = 40007;
    std::vector<float> init = rounded(values(n, 1), mt::kBFloat16);
    mt::Tensor p32 = leaf(mt::from_vector(init, {n}));
    mt::Tensor pc = leaf(mt::from_vector(init, {n}, {.dtype = mt::kBFloat16}));
    auto o32 = make(p32, false), oc = make(pc, true);
    EXPECT_TRUE(oc->has_packed_masters());
    EXPECT_FALSE(oc->state(0).master.defined());
    EXPECT_EQ(oc->state(0).master_low.numel(), 2 * n);
    for (int t = 0; t < 4; ++t) {
      std::vector<float> g = rounded(values(n, 10 + t), mt::kBFloat16);
      p32.set_grad(mt::from_vector(g, {n}));
      pc.set_grad(mt::from_vector(g, {n}, {.dtype = mt::kBFloat16}));
      o32->step();
      oc->step();
    }
    const std::vector<float> fp32 = p32.to_vector<float>();
    // The state dict reconstructs the full master.
    EXPECT_EQ(oc->state_dict().state[0].master.to_vector<float>(), fp32);
    const std::vector<float> pv = pc.to_vector<float>();
    int64_t differs_from_nearest = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(pv[i], truncated_bf16(fp32[i])) << i;
      differs_from_nearest += pv[i] != nearest_bf16(fp32[i]);
    }
    EXPECT_GT(differs_from_nearest, n / 4);  // about half the elements round up to nearest
  }
}

TEST(CompactState, Fp16ParametersKeepAFullMaster) {
  // fp16 is not the upper half of an fp32, so packed_master leaves fp16 parameters on full masters.
  mt::Tensor h = leaf(mt::ones({8}, {.dtype = mt::kFloat16}));
  mt::Tensor b = leaf(mt::ones({8}, {.dtype = mt::kBFloat16}));
  optim::AdamW opt({h, b}, {.packed_master = true});
  EXPECT_TRUE(opt.state(0).master.defined());
  EXPECT_FALSE(opt.state(0).master_low.defined());
  EXPECT_FALSE(opt.state(1).master.defined());
  EXPECT_TRUE(opt.state(1).master_low.defined());
  EXPECT_EQ(opt.state_bytes().masters, 4 * 8 + 2 * 8);
}

TEST(CompactState, PackMastersAndStateDictsAreInterchangeable) {
  const int64_t n = 1000;
  auto make_param = [&] { return leaf(mt::from_vector(values(n, 2), {n}, {.dtype = mt::kBFloat16})); };
  auto grad = [&](int t) { return mt::from_vector(values(n, 20 + t, 0.1), {n}, {.dtype = mt::kBFloat16}); };
  // A full-master run and a packed run (switched after 2 steps by pack_masters) stay on the same
  // master; a state dict of either loads into the other and continues identically.
  mt::Tensor pf = make_param(), pp = make_param();
  optim::AdamW full({pf}, {.lr = 1e-2}), packed({pp}, {.lr = 1e-2});
  for (int t = 0; t < 2; ++t) {
    pf.set_grad(grad(t));
    pp.set_grad(grad(t));
    full.step();
    packed.step();
  }
  packed.pack_masters();
  packed.pack_masters();  // idempotent
  EXPECT_TRUE(packed.has_packed_masters());
  for (int t = 2; t < 4; ++t) {
    pf.set_grad(grad(t));
    pp.set_grad(grad(t));
    full.step();
    packed.step();
  }
  const optim::OptimizerStateDict sd_full = full.state_dict(), sd_packed = packed.state_dict();
  EXPECT_FALSE(sd_packed.state[0].master_low.defined());
  EXPECT_EQ(sd_packed.state[0].master.to_vector<float>(), sd_full.state[0].master.to_vector<float>());

  // Load the full-master state dict into a fresh packed optimizer over zeroed parameters.
  mt::Tensor q = leaf(mt::zeros({n}, {.dtype = mt::kBFloat16}));
  optim::AdamW resumed({q}, {.lr = 1e-2, .packed_master = true});
  resumed.load_state_dict(sd_full);
  EXPECT_TRUE(resumed.has_packed_masters());
  EXPECT_EQ(q.to_vector<float>(), pp.to_vector<float>());  // the truncated master
  for (int t = 4; t < 6; ++t) {
    pp.set_grad(grad(t));
    q.set_grad(grad(t));
    packed.step();
    resumed.step();
  }
  EXPECT_EQ(q.to_vector<float>(), pp.to_vector<float>());
  EXPECT_EQ(resumed.state_dict().state[0].master.to_vector<float>(),
            packed.state_dict().state[0].master.to_vector<float>());

  // A state-dict entry with a packed lower half is refused (state dicts carry the full master).
  optim::OptimizerStateDict bad = packed.state_dict();
  bad.state[0].master_low = mt::zeros({n, 2}, {.dtype = mt::kUInt8});
  EXPECT_MT_ERROR(resumed.load_state_dict(bad), "master_low", "not a state-dict entry");

  // sync_masters_from_params: the master becomes the parameter exactly.
  {
    mt::NoGradGuard no_grad;
    q.fill_(0.75);
  }
  resumed.sync_masters_from_params();
  EXPECT_EQ(resumed.state_dict().state[0].master.to_vector<float>()[3], 0.75f);
}

TEST(CompactState, Bf16FirstMomentIsStoredRoundedAndUsedAsStored) {
  // One AdamW step from a nonzero bf16 m, checked element by element against the formula in fp32
  // with m rounded to bf16 after its update (the update then reads the rounded m).
  const int64_t n = 37;
  const std::vector<float> p0 = values(n, 3), g = values(n, 4, 0.3), m0 = rounded(values(n, 5, 0.2), mt::kBFloat16);
  mt::Tensor p = leaf(mt::from_vector(p0, {n}));
  const double lr = 1e-2, wd = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  optim::AdamW opt({p}, {.lr = lr, .weight_decay = wd, .exp_avg_dtype = mt::kBFloat16});
  optim::OptimizerStateDict sd = opt.state_dict();
  sd.state[0].step = 1;
  sd.state[0].exp_avg = mt::from_vector(m0, {n}, {.dtype = mt::kBFloat16});
  sd.state[0].exp_avg_sq = mt::full({n}, 0.01);
  opt.load_state_dict(sd);
  p.set_grad(mt::from_vector(g, {n}));
  opt.step();
  ASSERT_EQ(opt.state(0).exp_avg.dtype(), mt::kBFloat16);
  EXPECT_EQ(opt.state_bytes().moments, (2 + 4) * n);
  const std::vector<float> m = opt.state(0).exp_avg.to_vector<float>(), pv = p.to_vector<float>();
  const float neg_step = static_cast<float>(-(lr / (1.0 - std::pow(b1, 2.0))));
  const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(b2, 2.0)));
  const float w = static_cast<float>(1.0 - b1);
  for (int64_t i = 0; i < n; ++i) {
    const float m_new = nearest_bf16(m0[i] + w * (g[i] - m0[i]));
    ASSERT_EQ(m[i], m_new) << i;
    const float v = 0.01f * static_cast<float>(b2) + static_cast<float>(1.0 - b2) * g[i] * g[i];
    const float x = p0[i] * static_cast<float>(1.0 - lr * wd);
    ASSERT_EQ(pv[i], x + neg_step * (m_new / (std::sqrt(v) / bc2_sqrt + static_cast<float>(eps)))) << i;
  }
  // Moments are fp32 or bf16, nothing else.
  mt::Tensor r = leaf(mt::zeros({4}));
  EXPECT_MT_ERROR(optim::AdamW({r}, {.exp_avg_dtype = mt::kFloat16}), "exp_avg_dtype must be float32 or bfloat16");
}

TEST(CompactState, Bf16SecondMomentWouldStallWhileBf16FirstMomentTracks) {
  // Why exp_avg may be bf16 rounded to nearest and exp_avg_sq may not. After the moments have settled at 1, the gradient
  // jumps from 1 to 2 (g^2 from 1 to 4). A stored moment stops moving once its update,
  // (1 - beta) * distance to the target, is below half a bf16 ulp (2^-8 in [1, 2), 2^-7 in [2, 4)):
  //   m, beta1 = 0.9:   stops within 5 ulps of the target (0.1 * d < ulp / 2): 2% off, harmless;
  //   v, beta2 = 0.999: stops within 500 ulps: from v = 1 the first update 0.001 * 3 = 0.003 is
  //                     already below 2^-8 / 2 = 0.0039, so v never moves and the step size stays
  //                     twice too large.
  const float b1 = 0.9f, b2 = 0.999f;
  float m32 = 1.0f, v32 = 1.0f;
  mt::bfloat16 m16(1.0f), v16(1.0f);
  for (int t = 0; t < 5000; ++t) {
    const float g = 2.0f;
    m32 = b1 * m32 + (1.0f - b1) * g;
    v32 = b2 * v32 + (1.0f - b2) * g * g;
    m16 = mt::bfloat16(b1 * static_cast<float>(m16) + (1.0f - b1) * g);
    v16 = mt::bfloat16(b2 * static_cast<float>(v16) + (1.0f - b2) * g * g);
  }
  EXPECT_NEAR(m32, 2.0f, 1e-3f);  // 2 - 0.9^5000: fp32 stalls only within a few of its ulps (2^-23)
  EXPECT_NEAR(v32, 4.0f, 0.05f);  // 1 + 3 * (1 - 0.999^5000) = 3.98
  EXPECT_NEAR(static_cast<float>(m16), 2.0f, 5.0f / 128);  // 5 ulps of [1, 2)
  EXPECT_NE(static_cast<float>(m16), 1.0f);
  EXPECT_EQ(static_cast<float>(v16), 1.0f);  // stalled
}

TEST(CompactState, ModelStateBytesPerParameter) {
  // N = 1000 + 24 elements in two tensors, AdamW after one step.
  auto run = [](mt::DType dtype, optim::AdamOptions o) {
    std::vector<mt::Tensor> ps = {leaf(mt::zeros({1000}, {.dtype = dtype})), leaf(mt::zeros({4, 6}, {.dtype = dtype}))};
    optim::AdamW opt(ps, o);
    for (mt::Tensor& p : ps) p.set_grad(mt::ones(p.shape(), {.dtype = dtype}));
    opt.step();
    return opt.model_state_bytes();
  };
  const int64_t n = 1024;
  const optim::ModelStateBytes a = run(mt::kFloat32, {});
  EXPECT_EQ(a.num_elements, n);
  EXPECT_EQ(a.params, 4 * n);
  EXPECT_EQ(a.grads, 4 * n);
  EXPECT_EQ(a.masters, 0);
  EXPECT_EQ(a.optimizer_state, 8 * n);
  EXPECT_EQ(a.bytes_per_param(), 16.0);
  const optim::ModelStateBytes b = run(mt::kBFloat16, {});
  EXPECT_EQ(b.masters, 4 * n);
  EXPECT_EQ(b.bytes_per_param(), 16.0);
  EXPECT_EQ(run(mt::kFloat16, {.packed_master = true}).bytes_per_param(), 16.0);  // fp16: full master
  EXPECT_EQ(run(mt::kBFloat16, {.packed_master = true}).bytes_per_param(), 14.0);
  const optim::ModelStateBytes c = run(mt::kBFloat16, {.packed_master = true, .exp_avg_dtype = mt::kBFloat16});
  EXPECT_EQ(c.params, 2 * n);
  EXPECT_EQ(c.grads, 2 * n);
  EXPECT_EQ(c.masters, 2 * n);
  EXPECT_EQ(c.optimizer_state, 6 * n);
  EXPECT_EQ(c.bytes_per_param(), 12.0);
  // The accounting matches the allocator: masters and moments are what mt::memory counts.
  const int64_t before = mt::memory::stats(mixtrain::testing::test_device()).current_bytes;
  mt::Tensor p = leaf(mt::zeros({n}, {.dtype = mt::kBFloat16}));
  optim::AdamW opt({p}, {.packed_master = true, .exp_avg_dtype = mt::kBFloat16});
  p.set_grad(mt::ones({n}, {.dtype = mt::kBFloat16}));
  opt.step();
  EXPECT_EQ(mt::memory::stats(mixtrain::testing::test_device()).current_bytes - before, opt.model_state_bytes().total());
}

TEST(CompactState, VectorAdamMatchesThePortablePathBitForBit) {
  // Every storage combination (param dtype x master layout x m dtype) and option branch, over several
  // chunks with a ragged tail, with 1 and 2 threads: the AVX2 and AVX-512 register kernels against
  // the portable block path (run at the generic level, where its conversions are scalar too).
  std::vector<mt::cpu::Isa> levels;
  for (mt::cpu::Isa level : {mt::cpu::Isa::kAvx2, mt::cpu::Isa::kAvx512})
    if (mt::cpu::isa() >= level) levels.push_back(level);
  if (levels.empty()) GTEST_SKIP() << "no vector Adam kernel can run at " << mt::cpu::describe();
  struct Layout {
    mt::DType dtype;
    bool master, packed;
  };
  const std::vector<Layout> layouts = {{mt::kFloat32, false, false},  {mt::kBFloat16, true, false},
                                       {mt::kBFloat16, true, true},   {mt::kFloat16, true, false},
                                       {mt::kBFloat16, false, false}, {mt::kFloat16, false, false}};
  struct Variant {
    const char* name;
    bool adamw;
    optim::AdamOptions o;
    float inv_scale;
  };
  const std::vector<Variant> variants = {
      {"adamw", true, {.lr = 1e-2}, 1.0f},
      {"adam l2 amsgrad scaled", false, {.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true}, 0.25f},
      {"adamw beta1 0.3 (lerp from above)", true, {.lr = 1e-2, .betas = {0.3, 0.99}}, 1.0f},
  };
  for (const Layout& l : layouts)
    for (const Variant& v : variants)
      for (mt::DType m_dtype : {mt::kFloat32, mt::kBFloat16}) {
        SCOPED_TRACE(std::string(mt::to_string(l.dtype)) + (l.master ? (l.packed ? " packed" : " master") : "") + " " +
                     v.name + " m " + std::string(mt::to_string(m_dtype)));
        auto run = [&](mt::cpu::Isa level, int threads) {
          mt::cpu::MaxIsaGuard cap(level);
          return mt::testing::with_threads(threads, [&] {
            const int64_t n = 2 * 16384 + 1000 + 7;
            mt::Tensor p = leaf(mt::from_vector(values(n, 1), {n}, {.dtype = l.dtype}));
            optim::AdamOptions o = v.o;
            o.master_weights = l.master;
            o.packed_master = l.packed;
            o.exp_avg_dtype = m_dtype;
            std::unique_ptr<optim::Adam> opt = v.adamw ? std::make_unique<optim::AdamW>(std::vector<mt::Tensor>{p}, o)
                                                       : std::make_unique<optim::Adam>(std::vector<mt::Tensor>{p}, o);
            for (int t = 0; t < 3; ++t) {
              p.set_grad(mt::from_vector(values(n, 7 + t, 0.5), {n}, {.dtype = l.dtype}));
              if (v.inv_scale != 1.0f)
                opt->step_scaled(v.inv_scale, false);
              else
                opt->step();
            }
            const optim::ParamState& s = opt->state(0);
            std::vector<std::vector<float>> out = {p.to_vector<float>(), s.exp_avg.to_vector<float>(),
                                                   s.exp_avg_sq.to_vector<float>()};
            const mt::Tensor master = opt->state_dict().state[0].master;
            out.push_back(master.defined() ? master.to_vector<float>() : std::vector<float>{});
            if (s.max_exp_avg_sq.defined()) out.push_back(s.max_exp_avg_sq.to_vector<float>());
            return out;
          });
        };
        const auto portable = run(mt::cpu::Isa::kGeneric, 1);
        for (mt::cpu::Isa level : levels) {
          SCOPED_TRACE(mt::cpu::to_string(level));
          const auto simd = run(level, 1), simd2 = run(level, 2);
          EXPECT_EQ(portable, simd);
          EXPECT_EQ(simd, simd2);
        }
      }
}
