// GradScaler: PyTorch's kernel-level tests with their numbers (test_grad_scaling_update_scale,
// test_grad_scaling_unscale, the "perfect storm", test_grad_scaling_state_dict,
// test_grad_scale_will_not_overflow), the state machine's errors, disabled mode, the fused path for
// 16-bit parameters with fp32 masters, and the opt-in extensions. The end-to-end training cases are
// in test_grad_scaler_e2e.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "amp/scaler_ops.h"
#include "mixtrain/amp/grad_scaler.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/optim/adam.h"
#include "mixtrain/optim/sgd.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
using mt::amp::GradScaler;
using mt::amp::GradScalerStateDict;
using mt::testing::expect_error;
using ::testing::HasSubstr;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

mt::Tensor f32(double v) { return mt::scalar_tensor(v, {.dtype = mt::kFloat32}); }

// A parameter of `n` elements with value `v` and a gradient `g` (both `dtype`).
mt::Tensor param_with_grad(int64_t n, double v, double g, mt::DType dtype = mt::kFloat32) {
  mt::Tensor p = mt::full({n}, v, {.dtype = dtype});
  p.requires_grad_();
  p.set_grad(mt::full({n}, g, {.dtype = dtype}));
  return p;
}

// Lets `scaler` create its scale (the first scale() call does).
void init_scale(GradScaler& scaler) { (void)scaler.scale(f32(1.0)); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Kernels.

TEST(GradScalerKernels, UpdateScale_4_4_8_2) {
  // PyTorch test_grad_scaling_update_scale: growth 2, backoff 0.25, interval 2.
  mt::Tensor scale = f32(4.0);
  mt::Tensor tracker = mt::scalar_tensor(0, {.dtype = mt::kInt32});
  mt::Tensor found = f32(0.0);
  namespace d = mt::amp::detail;
  d::update_scale_(scale, tracker, found, 2.0, 0.25, 2);
  EXPECT_EQ(tracker.item<int32_t>(), 1);
  EXPECT_EQ(scale.item<float>(), 4.0f);
  d::update_scale_(scale, tracker, found, 2.0, 0.25, 2);
  EXPECT_EQ(tracker.item<int32_t>(), 0);
  EXPECT_EQ(scale.item<float>(), 8.0f);
  found.fill_(1.0);
  d::update_scale_(scale, tracker, found, 2.0, 0.25, 2);
  EXPECT_EQ(tracker.item<int32_t>(), 0);
  EXPECT_EQ(scale.item<float>(), 2.0f);
}

TEST(GradScalerKernels, UpdateScaleNeverGrowsToInf) {
  // 1e38 * 16 overflows fp32: the scale is kept (and the tracker still resets).
  mt::Tensor scale = f32(1e38), tracker = mt::scalar_tensor(0, {.dtype = mt::kInt32}), found = f32(0.0);
  mt::amp::detail::update_scale_(scale, tracker, found, 16.0, 0.5, 1);
  EXPECT_EQ(scale.item<float>(), 1e38f);
  EXPECT_EQ(tracker.item<int32_t>(), 0);
}

namespace {

struct UnscaleCase {
  const char* name;
  std::vector<mt::Tensor> grads;
  bool has_inf;
};

// g = full((20, 20), 4.0); ginf / gnan have [2, 2] set to inf / NaN. Fresh tensors per case.
mt::Tensor g4() { return mt::full({20, 20}, 4.0); }
mt::Tensor g4_with(float bad) {
  mt::Tensor t = g4();
  t.select(0, 2).select(0, 2).fill_(bad);
  return t;
}
mt::Tensor cols5(const mt::Tensor& t) { return t.slice(1, 0, 5); }

}  // namespace

TEST(GradScalerKernels, UnscaleCasesFromPyTorch) {
  // PyTorch test_grad_scaling_unscale: inv_scale 0.25; when no inf, every grad becomes exactly 1.
  std::vector<UnscaleCase> cases = {
      {"[g, g]", {g4(), g4()}, false},
      {"[g, g.t()]", {g4(), g4().t()}, false},
      {"[g, g[:, :5]]", {g4(), cols5(g4())}, false},
      {"[g[:, :5], g[:, :5]]", {cols5(g4()), cols5(g4())}, false},
      {"[g, ginf]", {g4(), g4_with(kInf)}, true},
      {"[g, gnan]", {g4(), g4_with(kNaN)}, true},
      {"[g, ginf[:, :5]]", {g4(), cols5(g4_with(kInf))}, true},
      {"[g, gnan[:, :5]]", {g4(), cols5(g4_with(kNaN))}, true},
      {"[ginf, g[:, :5]]", {g4_with(kInf), cols5(g4())}, true},
      {"[ginf[:, :5], g[:, :5]]", {cols5(g4_with(kInf)), cols5(g4())}, true},
  };
  for (auto& c : cases) {
    SCOPED_TRACE(c.name);
    mt::Tensor found = f32(0.0);
    mt::amp::detail::non_finite_check_and_unscale_(c.grads, found, f32(0.25));
    EXPECT_EQ(found.item<float>(), c.has_inf ? 1.0f : 0.0f);
    if (!c.has_inf) {
      for (const mt::Tensor& g : c.grads)
        for (float v : g.to_vector<float>()) EXPECT_NEAR(v, 1.0f, 1e-7 + 1e-5);
    }
  }
}

TEST(GradScalerKernels, UnscaleTouchesOnlyTheViewAndAlwaysMultiplies) {
  mt::Tensor base = g4_with(kInf);
  mt::Tensor view = cols5(base);
  mt::Tensor found = f32(0.0);
  EXPECT_EQ(mt::amp::detail::non_finite_check_and_unscale_({g4(), view}, found, f32(0.25)), 1);
  EXPECT_EQ(found.item<float>(), 1.0f);
  std::vector<float> v = base.to_vector<float>();
  for (int r = 0; r < 20; ++r)
    for (int c = 0; c < 20; ++c) {
      float x = v[r * 20 + c];
      if (r == 2 && c == 2)
        EXPECT_TRUE(std::isinf(x));
      else
        EXPECT_EQ(x, c < 5 ? 1.0f : 4.0f) << r << "," << c;  // multiplied despite the inf; outside untouched
    }
  // found_inf is only ever set: a clean list does not clear it.
  mt::amp::detail::non_finite_check_and_unscale_({g4()}, found, f32(0.25));
  EXPECT_EQ(found.item<float>(), 1.0f);
}

TEST(GradScalerKernels, UnscaleMixedDtypesPerfectStorm) {
  // PyTorch's "perfect storm": [g, g[:, :5], g.half(), g.half()] (+ bf16 here): no injection -> 0 and all
  // ones; an inf injected into any single grad -> found_inf exactly 1.
  auto make = [] {
    return std::vector<mt::Tensor>{g4(), cols5(g4()), g4().to(mt::kFloat16), g4().to(mt::kFloat16),
                                   g4().to(mt::kBFloat16)};
  };
  {
    std::vector<mt::Tensor> grads = make();
    mt::Tensor found = f32(0.0);
    EXPECT_EQ(mt::amp::detail::non_finite_check_and_unscale_(grads, found, f32(0.25)), -1);
    EXPECT_EQ(found.item<float>(), 0.0f);
    for (const mt::Tensor& g : grads)
      for (float v : g.to_vector<float>()) EXPECT_EQ(v, 1.0f);
  }
  for (size_t k = 0; k < 5; ++k) {
    std::vector<mt::Tensor> grads = make();
    grads[k].select(0, 3).select(0, 1).fill_(kInf);
    mt::Tensor found = f32(0.0);
    EXPECT_EQ(mt::amp::detail::non_finite_check_and_unscale_(grads, found, f32(0.25)), static_cast<int64_t>(k));
    EXPECT_EQ(found.item<float>(), 1.0f) << k;
  }
}

TEST(GradScalerKernels, UnscaleWidens16BitForTheCheckAndLargeListsAreDeterministic) {
  // 65504 (fp16 max) * 2 overflows only in fp16 storage: the check runs on the widened input, the
  // product is rounded on store. A large list (several chunks, several threads) gives the same result.
  mt::Tensor h = mt::full({3}, 65504.0, {.dtype = mt::kFloat16});
  mt::Tensor found = f32(0.0);
  mt::amp::detail::non_finite_check_and_unscale_({h}, found, f32(2.0));
  EXPECT_EQ(found.item<float>(), 0.0f);
  EXPECT_TRUE(std::isinf(h.to_vector<float>()[0]));
  mt::Tensor big = mt::full({300000}, 8.0);
  big.select(0, 299999).fill_(kNaN);
  mt::Tensor found2 = f32(0.0);
  EXPECT_EQ(mt::amp::detail::non_finite_check_and_unscale_({mt::full({7}, 1.0), big}, found2, f32(0.125)), 1);
  EXPECT_EQ(found2.item<float>(), 1.0f);
  EXPECT_EQ(big.to_vector<float>()[123456], 1.0f);
}

// ---------------------------------------------------------------------------------------------
// State dict.

TEST(GradScaler, LoadStateDictRefusesValuesThatWouldCorruptTraining) {
  GradScaler s;
  const GradScalerStateDict good = s.state_dict();
  auto with = [&](const char* key, double v) {
    GradScalerStateDict d = good;
    d[key] = v;
    return d;
  };
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  for (double v : {0.0, -1.0, inf, nan, 1e39})
    EXPECT_MT_ERROR(s.load_state_dict(with("scale", v)), "scale must be a finite fp32 value > 0");
  for (double v : {1.0, 0.5, inf, nan}) EXPECT_MT_ERROR(s.load_state_dict(with("growth_factor", v)), "growth_factor");
  for (double v : {0.0, 1.0, 2.0, nan}) EXPECT_MT_ERROR(s.load_state_dict(with("backoff_factor", v)), "backoff_factor");
  // 1e300 used to be cast to int64: undefined behaviour.
  for (double v : {0.0, 2.5, 1e300, -3.0, nan})
    EXPECT_MT_ERROR(s.load_state_dict(with("growth_interval", v)), "growth_interval must be an integer");
  for (double v : {-1.0, 0.5, 1e12}) EXPECT_MT_ERROR(s.load_state_dict(with("_growth_tracker", v)), "_growth_tracker");
  // Nothing changed on the refusals; a valid dict still loads.
  EXPECT_EQ(s.get_scale(), 65536.0);
  s.load_state_dict(with("scale", 1024.0));
  EXPECT_EQ(s.get_scale(), 1024.0);
}

TEST(GradScaler, StateDictRestore_3_4_half_2_0) {
  // PyTorch test_grad_scaling_state_dict, with and without lazy init of s1.
  for (bool lazy_init : {false, true}) {
    SCOPED_TRACE(lazy_init);
    GradScaler s0({.init_scale = 3.0, .growth_factor = 4.0, .backoff_factor = 0.5, .growth_interval = 2});
    GradScaler s1({.init_scale = 6.0, .growth_factor = 7.0, .backoff_factor = 0.8, .growth_interval = 1});
    // PyTorch sets s1._init_growth_tracker = 7 directly; here through a state dict.
    s1.load_state_dict({{"scale", 6.0},
                        {"growth_factor", 7.0},
                        {"backoff_factor", 0.8},
                        {"growth_interval", 1},
                        {"_growth_tracker", 7}});
    EXPECT_EQ(s1.get_growth_tracker(), 7);
    if (lazy_init) {
      init_scale(s1);
      EXPECT_EQ(s1.get_growth_tracker(), 7);
    }
    s1.load_state_dict(s0.state_dict());
    EXPECT_EQ(s1.get_scale(), 3.0);
    EXPECT_EQ(s1.get_growth_factor(), 4.0);
    EXPECT_EQ(s1.get_backoff_factor(), 0.5);
    EXPECT_EQ(s1.get_growth_interval(), 2);
    EXPECT_EQ(s1.get_growth_tracker(), 0);
  }
}

TEST(GradScaler, StateDictKeysDisabledAndErrors) {
  GradScaler s;
  mt::amp::GradScalerStateDict sd = s.state_dict();
  std::vector<std::string> keys;
  for (const auto& [k, v] : sd) keys.push_back(k);
  // std::map iterates its keys in sorted order.
  EXPECT_EQ(keys, (std::vector<std::string>{"_growth_tracker", "backoff_factor", "growth_factor", "growth_interval",
                                            "scale"}));
  EXPECT_EQ(sd["scale"], 65536.0);
  EXPECT_EQ(sd["growth_interval"], 2000.0);
  expect_error(
      [&] { s.load_state_dict({}); },
      {"The source state dict is empty, possibly because it was saved from a disabled instance of GradScaler."});
  sd.erase("_growth_tracker");
  expect_error([&] { s.load_state_dict(sd); }, {"missing key '_growth_tracker'"});
  GradScaler off({.enabled = false});
  EXPECT_TRUE(off.state_dict().empty());
  off.load_state_dict({});  // disabled: no-op
}

// ---------------------------------------------------------------------------------------------
// The state machine.

TEST(GradScaler, ConstructorValidatesFactorsWhenEnabled) {
  expect_error([] { GradScaler s({.growth_factor = 1.0}); }, {"The growth factor must be > 1.0."});
  expect_error([] { GradScaler s({.backoff_factor = 1.0}); }, {"The backoff factor must be < 1.0."});
  GradScaler off({.growth_factor = 0.5, .enabled = false});  // not validated when disabled
  EXPECT_FALSE(off.is_enabled());
}

TEST(GradScaler, ScaleIsLazyFp32AndRecordedByAutograd) {
  GradScaler s({.init_scale = 4.0});
  EXPECT_FALSE(s.scale_tensor().defined());
  EXPECT_EQ(s.get_scale(), 4.0);
  mt::Tensor x = mt::full({}, 3.0);
  x.requires_grad_();
  mt::Tensor y = s.scale(x);
  ASSERT_TRUE(s.scale_tensor().defined());
  EXPECT_EQ(s.scale_tensor().dtype(), mt::kFloat32);
  EXPECT_EQ(s.scale_tensor().dim(), 0);
  EXPECT_EQ(y.item<float>(), 12.0f);
  EXPECT_FALSE(y.is_same(x));
  y.backward();
  EXPECT_EQ(x.grad().item<float>(), 4.0f);
  // 16-bit outputs with dims keep their dtype; 0-dim ones promote like PyTorch's 0-dim rule.
  EXPECT_EQ(s.scale(mt::ones({3}, {.dtype = mt::kFloat16})).dtype(), mt::kFloat16);
  EXPECT_EQ(s.scale(mt::ones({3}, {.dtype = mt::kBFloat16})).to_vector<float>()[1], 4.0f);
  std::vector<mt::Tensor> many = s.scale(std::vector<mt::Tensor>{mt::full({2}, 4.0), mt::full({1}, 4.0)});
  EXPECT_EQ(many[1].item<float>(), 16.0f);
}

TEST(GradScaler, MisuseErrors) {
  mt::Tensor p = param_with_grad(4, 1.0, 1.0);
  mt::optim::SGD opt({p}, {.lr = 0.1});
  GradScaler s;
  expect_error([&] { s.unscale_(opt); },
               {"Attempted unscale_ but _scale is None.  This may indicate your script did not use "
                "scaler.scale(loss or outputs) earlier in the iteration."});
  expect_error([&] { s.step(opt); }, {"Attempted step but _scale is None."});
  expect_error([&] { s.update(); }, {"Attempted update but _scale is None."});
  init_scale(s);
  expect_error([&] { s.update(); }, {"No inf checks were recorded prior to update."});
  s.unscale_(opt);
  expect_error([&] { s.unscale_(opt); },
               {"unscale_() has already been called on this optimizer since the last update()."});
  EXPECT_TRUE(s.step(opt));
  expect_error([&] { s.unscale_(opt); }, {"unscale_() is being called after step()."});
  expect_error([&] { s.step(opt); }, {"step() has already been called since the last update()."});
  s.update();
  // After update() everything is allowed again.
  p.set_grad(mt::full({4}, 1.0));
  s.unscale_(opt);
  EXPECT_TRUE(s.step(opt));
  s.update();
  // An optimizer none of whose parameters has a gradient.
  opt.zero_grad();
  expect_error([&] { s.step(opt); }, {"No inf checks were recorded for this optimizer."});
}

TEST(GradScaler, StepUnscalesSkipsOnInfAndUpdatesOncePerIteration) {
  mt::Tensor p = param_with_grad(4, 1.0, 0.0);
  mt::optim::SGD opt({p}, {.lr = 1.0});
  GradScaler s({.init_scale = 8.0, .growth_interval = 1});
  init_scale(s);
  p.set_grad(mt::full({4}, 8.0));  // scaled gradient of 1
  EXPECT_TRUE(s.step(opt));
  EXPECT_FALSE(s.last_step_skipped());
  EXPECT_EQ(p.to_vector<float>()[0], 0.0f);         // 1 - 1.0 * (8 / 8)
  EXPECT_EQ(p.grad().to_vector<float>()[0], 1.0f);  // unscaled in place, like PyTorch
  s.update();
  EXPECT_EQ(s.get_scale(), 16.0);
  p.set_grad(mt::full({4}, kNaN));
  EXPECT_FALSE(s.step(opt));
  EXPECT_TRUE(s.last_step_skipped());
  EXPECT_EQ(p.to_vector<float>()[0], 0.0f);  // unchanged
  s.update();
  EXPECT_EQ(s.get_scale(), 8.0);
  EXPECT_EQ(s.total_skipped_steps(), 1);
  EXPECT_EQ(s.consecutive_skipped_iterations(), 1);
  EXPECT_EQ(s.last_nonfinite_param(), "param_groups[0].params[0]");
  // update(new_scale): sets the scale, leaves the tracker; a tensor argument is copied.
  mt::Tensor ns = f32(3.0);
  p.set_grad(mt::full({4}, 1.0));
  s.step(opt);
  s.update(ns);
  ns.fill_(100.0);
  EXPECT_EQ(s.get_scale(), 3.0);
  expect_error([&] { s.update(mt::full({2}, 1.0)); }, {"new_scale should be a float or a 1-element"});
}

TEST(GradScaler, WillNotOverflow) {
  // PyTorch test_grad_scale_will_not_overflow: Linear(5, 1), Adam, init 1e38, growth 16, interval 1.
  mt::Generator gen(0);
  mt::Tensor w = mt::randn({1, 5}, {}, &gen), b = mt::zeros({1});
  w.requires_grad_();
  b.requires_grad_();
  mt::optim::Adam opt({w, b});
  GradScaler s({.init_scale = 1e38, .growth_factor = 16.0, .growth_interval = 1});
  mt::Tensor x = mt::randn({1, 5}, {}, &gen);
  mt::Tensor target = mt::mul(mt::randn({1, 1}, {}, &gen), 1e-30);
  mt::Tensor diff = mt::sub(mt::linear(x, w, b), target);
  mt::Tensor loss = mt::mean(mt::mul(diff, diff));  // ((model(x) - target) ** 2).mean()
  s.scale(loss).backward();
  s.step(opt);
  s.update();
  EXPECT_TRUE(std::isfinite(s.get_scale()));
  EXPECT_GT(s.get_scale(), 0.0);
}

TEST(GradScaler, DisabledIsAPassThrough) {
  mt::Tensor p = param_with_grad(2, 1.0, 0.5);
  mt::optim::SGD opt({p}, {.lr = 1.0});
  GradScaler s({.enabled = false});
  mt::Tensor loss = mt::full({}, 2.0);
  EXPECT_TRUE(s.scale(loss).is_same(loss));
  s.unscale_(opt);
  s.unscale_(opt);  // no state machine when disabled
  EXPECT_TRUE(s.step(opt));
  EXPECT_EQ(p.to_vector<float>()[0], 0.5f);
  EXPECT_EQ(p.grad().to_vector<float>()[0], 0.5f);
  s.update();
  s.update(7.0);
  EXPECT_EQ(s.get_scale(), 1.0);
  EXPECT_EQ(s.get_growth_tracker(), 0);
  EXPECT_FALSE(s.scale_tensor().defined());
}

// ---------------------------------------------------------------------------------------------
// fp16 gradients and the fused path.

TEST(GradScaler, RefusesFp16GradientsWithAHint) {
  mt::Tensor p = param_with_grad(4, 1.0, 1.0, mt::kFloat16);
  mt::optim::SGD opt({{"fc.weight", p}}, {.lr = 0.1});
  GradScaler s;
  init_scale(s);
  expect_error([&] { s.unscale_(opt); }, {"Attempting to unscale FP16 gradients."});
  expect_error([&] { s.unscale_(opt); }, {"master_weights"});
  expect_error([&] { s.unscale_(opt); }, {"fc.weight"});
  // bf16 gradients are accepted (PyTorch rejects only fp16).
  mt::Tensor q = param_with_grad(4, 1.0, 65536.0, mt::kBFloat16);
  mt::optim::SGD opt2({q}, {.lr = 0.1});
  s.unscale_(opt2);
  EXPECT_EQ(q.grad().to_vector<float>()[0], 1.0f);
  // allow_fp16_unscale opts in.
  GradScaler s2({.init_scale = 2.0, .allow_fp16_unscale = true});
  init_scale(s2);
  s2.unscale_(opt);
  EXPECT_EQ(p.grad().to_vector<float>()[0], 0.5f);
}

TEST(GradScaler, FusedUnscaleForFp16MasterWeights) {
  // fp16 parameter with an fp32 master. The true gradient 1e-7 is below fp16's normal range (it would
  // round to the subnormal 1.19e-7 if unscaled in fp16); scaled by 65536 it is the normal 6.55e-3.
  // step() only checks the fp16 gradients and passes 1/scale to the optimizer, which unscales in fp32.
  mt::Tensor p = param_with_grad(8, 0.5, 0.0, mt::kFloat16);
  mt::optim::SGD opt({p}, {.lr = 1000.0});
  ASSERT_TRUE(opt.supports_fused_unscale());
  GradScaler s;
  init_scale(s);
  const float scaled = static_cast<float>(mt::float16(1e-7f * 65536.0f));  // what backward would produce
  p.set_grad(mt::full({8}, scaled, {.dtype = mt::kFloat16}));
  EXPECT_TRUE(s.step(opt));
  s.update();
  const float expected_master = 0.5f - 1000.0f * (scaled * (1.0f / 65536.0f));
  EXPECT_EQ(opt.state(0).master.to_vector<float>()[0], expected_master);
  EXPECT_EQ(p.to_vector<float>()[0], static_cast<float>(mt::float16(expected_master)));
  EXPECT_EQ(p.grad().to_vector<float>()[0], scaled);  // the fused path leaves the gradients scaled
  // An inf skips the step, leaves master and param alone, and backs off.
  p.grad().select(0, 5).fill_(kInf);
  (void)s.scale(f32(1.0));
  EXPECT_FALSE(s.step(opt));
  s.update();
  EXPECT_EQ(opt.state(0).master.to_vector<float>()[0], expected_master);
  EXPECT_EQ(s.get_scale(), 32768.0);
  EXPECT_EQ(s.last_nonfinite_param(), "param_groups[0].params[0]");
  // The check before a fused step writes nothing, so it leaves the gradients' version counters alone
  // (a gradient saved for a later backward or watched by a hook stays valid); unscale_() bumps them.
  p.set_grad(mt::full({8}, scaled, {.dtype = mt::kFloat16}));
  const uint64_t version = p.grad().version();
  (void)s.scale(f32(1.0));
  EXPECT_TRUE(s.step(opt));
  EXPECT_EQ(p.grad().version(), version);
  s.update();
}

// ---------------------------------------------------------------------------------------------
// Extensions.

TEST(GradScalerExtensions, MinAndMaxScaleClamp) {
  mt::Tensor p = param_with_grad(2, 1.0, kInf);
  mt::optim::SGD opt({p});
  GradScaler s({.init_scale = 4.0, .growth_interval = 1, .min_scale = 1.0, .max_scale = 8.0});
  init_scale(s);
  for (int i = 0; i < 5; ++i) {
    s.step(opt);
    s.update();
  }
  EXPECT_EQ(s.get_scale(), 1.0);  // 4 -> 2 -> 1 -> clamped at 1
  p.set_grad(mt::full({2}, 1.0));
  for (int i = 0; i < 5; ++i) {
    s.step(opt);
    s.update();
  }
  EXPECT_EQ(s.get_scale(), 8.0);  // 1 -> 2 -> 4 -> 8 -> clamped at 8
}

TEST(GradScalerExtensions, CollapseDiagnosticNamesTheParameter) {
  mt::Tensor w = param_with_grad(3, 1.0, 1.0), b = param_with_grad(3, 1.0, 1.0);
  mt::optim::SGD opt({{"fc1.weight", w}, {"fc1.bias", b}});
  GradScaler s({.collapse = {.max_consecutive_skips = 3}});
  init_scale(s);
  b.grad().select(0, 1).fill_(kNaN);
  for (int i = 0; i < 2; ++i) {
    EXPECT_FALSE(s.step(opt));
    s.update();
  }
  EXPECT_EQ(s.consecutive_skipped_iterations(), 2);
  EXPECT_FALSE(s.step(opt));
  expect_error([&] { s.update(); }, {"3 iteration(s) in a row", "'fc1.bias'"});  // the collapse diagnostic
  // The state was reset before throwing: the next iteration works.
  b.set_grad(mt::full({3}, 1.0));
  EXPECT_TRUE(s.step(opt));
  s.update();
  EXPECT_EQ(s.consecutive_skipped_iterations(), 0);
  EXPECT_EQ(s.total_skipped_steps(), 3);
}

TEST(GradScalerExtensions, CollapseDiagnosticWarnsOncePerRunAndByScale) {
  mt::Tensor w = param_with_grad(3, 1.0, kInf);
  mt::optim::SGD opt({{"w", w}});
  std::vector<std::string> warnings;
  GradScaler s({.init_scale = 16.0,
                .collapse = {.scale_below = 3.0,
                             .action = mt::amp::CollapseAction::kWarn,
                             .warn = [&](const std::string& m) { warnings.push_back(m); }}});
  init_scale(s);
  for (int i = 0; i < 6; ++i) {  // 8, 4, 2 (warn), 1, 0.5, 0.25
    s.step(opt);
    s.update();
  }
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("below the threshold 3"));
  EXPECT_THAT(warnings[0], HasSubstr("'w'"));
  // Defaults: nothing is ever reported.
  GradScaler quiet({.init_scale = 16.0});
  init_scale(quiet);
  for (int i = 0; i < 40; ++i) {
    quiet.step(opt);
    quiet.update();
  }
  EXPECT_EQ(quiet.consecutive_skipped_iterations(), 40);
}
