// SGD, Adam, AdamW: a few steps on fixed tensors against the update formulas written out in double
// (PyTorch's documented algorithms), parameter groups, zero_grad, state-dict round trips, option
// checks. Gradients are set directly, so these tests need no other op.
#include <gtest/gtest.h>

#include <cmath>

#include "mixtrain/mixtrain.h"
#include "mixtrain/optim/adam.h"
#include "mixtrain/optim/sgd.h"
#include "support/cpu_env.h"
#include "support/expect_error.h"
#include "support/gradcheck.h"

namespace mt = mixtrain;
namespace optim = mixtrain::optim;
using mt::testing::expect_error;

namespace {

constexpr int kN = 6;
const std::vector<double> kP0 = {0.5, -1.25, 2.0, 0.1, -0.3, 3.0};

// The gradient of element i at step t, rounded to fp32 (what the optimizer reads).
double grad_at(int t, int i) { return static_cast<float>(std::sin(1.3 * i + 0.7 * t) * (1.0 + 0.1 * i)); }

mt::Tensor make_param(mt::DType dtype = mt::kFloat32) {
  mt::Tensor p = mt::from_vector(kP0, {kN}, {.dtype = dtype});
  p.requires_grad_();
  return p;
}

void set_grad(mt::Tensor p, int t) {
  std::vector<double> g(kN);
  for (int i = 0; i < kN; ++i) g[i] = grad_at(t, i);
  p.set_grad(mt::from_vector(g, {kN}, {.dtype = p.dtype()}));
}

// Reference SGD (torch.optim.SGD's algorithm) in double.
std::vector<double> sgd_reference(int steps, double lr, double momentum, double dampening, double wd, bool nesterov) {
  std::vector<double> p = kP0, buf(kN, 0.0);
  for (int t = 0; t < steps; ++t)
    for (int i = 0; i < kN; ++i) {
      double g = grad_at(t, i);
      if (wd != 0) g += wd * p[i];
      if (momentum != 0) {
        buf[i] = t == 0 ? g : momentum * buf[i] + (1 - dampening) * g;
        g = nesterov ? g + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * g;
    }
  return p;
}

// Reference Adam / AdamW (torch.optim.Adam/AdamW's algorithm) in double.
std::vector<double> adam_reference(int steps, double lr, double b1, double b2, double eps, double wd, bool decoupled,
                                   bool amsgrad) {
  std::vector<double> p = kP0, m(kN, 0.0), v(kN, 0.0), vmax(kN, 0.0);
  for (int t = 1; t <= steps; ++t)
    for (int i = 0; i < kN; ++i) {
      double g = grad_at(t - 1, i);
      if (wd != 0) {
        if (decoupled)
          p[i] *= 1 - lr * wd;
        else
          g += wd * p[i];
      }
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      double vh = v[i];
      if (amsgrad) vh = vmax[i] = std::max(vmax[i], v[i]);
      p[i] -= lr / bc1 * m[i] / (std::sqrt(vh) / std::sqrt(bc2) + eps);
    }
  return p;
}

void run(optim::Optimizer& opt, const mt::Tensor& p, int steps, int first_step = 0) {
  for (int t = first_step; t < first_step + steps; ++t) {
    set_grad(p, t);
    opt.step();
  }
}

mt::Tensor ref_tensor(const std::vector<double>& v) { return mt::from_vector(v, {kN}, {.dtype = mt::kFloat64}); }

}  // namespace

TEST(SGD, MatchesReferenceFormulas) {
  struct Case {
    const char* name;
    optim::SGDOptions o;
  };
  std::vector<Case> cases = {
      {"plain", {.lr = 0.1}},
      {"momentum", {.lr = 0.1, .momentum = 0.9}},
      {"momentum+dampening", {.lr = 0.05, .momentum = 0.8, .dampening = 0.3}},
      {"nesterov", {.lr = 0.1, .momentum = 0.9, .nesterov = true}},
      {"weight_decay", {.lr = 0.1, .momentum = 0.5, .weight_decay = 0.01}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    mt::Tensor p = make_param();
    optim::SGD opt({p}, c.o);
    run(opt, p, 5);
    EXPECT_CLOSE(p, ref_tensor(sgd_reference(5, c.o.lr, c.o.momentum, c.o.dampening, c.o.weight_decay, c.o.nesterov)),
                 mt::testing::kFp32VsReference);
  }
  // Plain SGD is one fp32 multiply-add per step: bit exact against the same math in fp32.
  mt::Tensor p = make_param();
  optim::SGD opt({p}, {.lr = 0.1});
  run(opt, p, 1);
  for (int i = 0; i < kN; ++i)
    EXPECT_EQ(p.to_vector<float>()[i], static_cast<float>(kP0[i]) + (-0.1f) * static_cast<float>(grad_at(0, i)));
}

TEST(Adam, MatchesReferenceFormulas) {
  struct Case {
    const char* name;
    bool adamw;
    optim::AdamOptions o;
  };
  std::vector<Case> cases = {
      {"adam", false, {.lr = 0.01}},
      {"adam betas eps", false, {.lr = 0.02, .betas = {0.8, 0.99}, .eps = 1e-6}},
      {"adam weight_decay (L2)", false, {.lr = 0.01, .weight_decay = 0.1}},
      {"adam amsgrad", false, {.lr = 0.01, .amsgrad = true}},
      {"adam amsgrad fast beta2", false, {.lr = 0.01, .betas = {0.9, 0.5}, .amsgrad = true}},
      {"adamw (default decay 1e-2)", true, {.lr = 0.01}},
      {"adamw decay 0.1 amsgrad", true, {.lr = 0.01, .weight_decay = 0.1, .amsgrad = true}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    mt::Tensor p = make_param();
    std::unique_ptr<optim::Adam> opt = c.adamw ? std::make_unique<optim::AdamW>(std::vector<mt::Tensor>{p}, c.o)
                                               : std::make_unique<optim::Adam>(std::vector<mt::Tensor>{p}, c.o);
    EXPECT_STREQ(opt->name(), c.adamw ? "AdamW" : "Adam");
    run(*opt, p, 6);
    const double wd = c.o.weight_decay.value_or(c.adamw ? 1e-2 : 0.0);
    EXPECT_EQ(opt->options().weight_decay, wd);
    std::vector<double> ref =
        adam_reference(6, c.o.lr, c.o.betas.first, c.o.betas.second, c.o.eps, wd, c.adamw, c.o.amsgrad);
    EXPECT_CLOSE(p, ref_tensor(ref), mt::testing::kFp32VsReference);
    EXPECT_EQ(opt->state(0).step, 6);
  }
  // The variants really differ (so the comparisons above can fail).
  auto ref = [](bool decoupled) { return adam_reference(6, 0.01, 0.9, 0.999, 1e-8, 0.1, decoupled, false); };
  auto ref_b2 = [](bool amsgrad) { return adam_reference(6, 0.01, 0.9, 0.5, 1e-8, 0.0, false, amsgrad); };
  auto distance = [](const std::vector<double>& a, const std::vector<double>& b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
    return d;
  };
  EXPECT_GT(distance(ref(false), ref(true)), 1e-4);
  EXPECT_GT(distance(ref_b2(false), ref_b2(true)), 1e-3);  // the max matters when v shrinks
}

TEST(Optimizer, ParamGroupsHaveTheirOwnOptions) {
  mt::Tensor a = make_param(), b = make_param();
  optim::SGD opt(
      std::vector<optim::ParamGroupSpec<optim::SGDOptions>>{{.params = {a}, .options = {.lr = 0.1}, .names = {"a"}},
                                                            {.params = {b}, .options = {.lr = 0.01, .momentum = 0.9}}});
  run(opt, a, 1);  // sets only a's grad
  EXPECT_FALSE(b.grad().defined());
  EXPECT_EQ(b.to_vector<double>(), make_param().to_vector<double>());  // no grad: untouched
  EXPECT_EQ(opt.state(1).step, 0);
  set_grad(a, 1);
  set_grad(b, 1);
  opt.step();
  EXPECT_CLOSE(b, ref_tensor([] {
                 std::vector<double> p = kP0;
                 for (int i = 0; i < kN; ++i) p[i] -= 0.01 * grad_at(1, i);
                 return p;
               }()),
               mt::testing::kFp32VsReference);
  EXPECT_EQ(opt.num_param_groups(), 2u);
  EXPECT_EQ(opt.lr(1), 0.01);
  EXPECT_EQ(opt.param_name(0), "a");
  EXPECT_EQ(opt.param_name(1), "param_groups[1].params[0]");
  opt.set_lr(0.5);
  EXPECT_EQ(opt.options(0).lr, 0.5);
  EXPECT_EQ(opt.options(1).lr, 0.5);
}

TEST(Optimizer, ZeroGradSetsGradientsToUndefined) {
  mt::Tensor p = make_param();
  optim::Adam opt({p});
  set_grad(p, 0);
  ASSERT_TRUE(p.grad().defined());
  opt.zero_grad();
  EXPECT_FALSE(p.grad().defined());
  opt.step();  // nothing to do
  EXPECT_EQ(opt.state(0).step, 0);
}

TEST(Optimizer, StateDictRoundTripContinuesIdentically) {
  for (bool adam : {false, true}) {
    SCOPED_TRACE(adam ? "AdamW amsgrad" : "SGD nesterov");
    auto make = [&](const mt::Tensor& p) -> std::unique_ptr<optim::Optimizer> {
      if (adam)
        return std::make_unique<optim::AdamW>(std::vector<mt::Tensor>{p},
                                              optim::AdamOptions{.lr = 0.01, .amsgrad = true});
      return std::make_unique<optim::SGD>(std::vector<mt::Tensor>{p},
                                          optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
    };
    mt::Tensor pa = make_param();
    auto a = make(pa);
    run(*a, pa, 3);
    a->set_lr(0, 0.02);
    optim::OptimizerStateDict sd = a->state_dict();
    EXPECT_EQ(sd.param_groups[0].at("lr"), 0.02);
    EXPECT_EQ(sd.state[0].step, 3);
    EXPECT_EQ(sd.state[0].named_tensors().size(), adam ? 3u : 1u);

    mt::Tensor pb = mt::from_vector(pa.to_vector<float>(), {kN});
    pb.requires_grad_();
    auto b = make(pb);
    b->load_state_dict(sd);
    EXPECT_EQ(b->lr(0), 0.02);
    run(*a, pa, 3, 3);
    run(*b, pb, 3, 3);
    EXPECT_EQ(pa.to_vector<float>(), pb.to_vector<float>());
    // The snapshot is a deep copy: a's later steps did not change it.
    EXPECT_EQ(sd.state[0].step, 3);
    EXPECT_NE(sd.state[0].named_tensors()[0].second.to_vector<float>(),
              a->state(0).named_tensors()[0].second.to_vector<float>());
  }
}

TEST(Optimizer, LoadStateDictChecksShapesAndCounts) {
  mt::Tensor p = make_param();
  optim::Adam opt({p});
  run(opt, p, 1);
  optim::OptimizerStateDict sd = opt.state_dict();
  mt::Tensor q = mt::zeros({3});
  q.requires_grad_();
  optim::Adam other({q});
  expect_error([&] { other.load_state_dict(sd); }, {"state 'exp_avg' of param_groups[0].params[0] is [6] float32"});
  optim::Adam two({make_param(), make_param()});
  expect_error([&] { two.load_state_dict(sd); }, {"has 1 parameter states, this optimizer has 2 parameters"});
  sd.param_groups[0].erase("eps");
  expect_error([&] { opt.load_state_dict(sd); }, {"missing key 'eps'"});
}

TEST(Optimizer, RejectsBadParametersAndOptions) {
  mt::Tensor p = make_param();
  expect_error([&] { optim::SGD o({p}, {.lr = -1.0}); }, {"invalid learning rate"});
  expect_error([&] { optim::SGD o({p}, {.lr = 0.1, .nesterov = true}); },
               {"Nesterov momentum requires a momentum and zero dampening"});
  expect_error([&] { optim::Adam o({p}, {.betas = {1.0, 0.999}}); }, {"invalid beta parameter at index 0"});
  expect_error([&] { optim::SGD o({p, p}); }, {"appear more than once"});
  mt::Tensor d = mt::zeros({2}, {.dtype = mt::kFloat64});
  d.requires_grad_();
  expect_error([&] { optim::SGD o({d}); }, {"parameters must be float32, bfloat16 or float16"});
  mt::Tensor nonleaf = p.slice(0, 0, 2);
  expect_error([&] { optim::SGD o({nonleaf}); }, {"can't optimize a non-leaf tensor"});
  expect_error([&] { optim::SGD o(std::vector<mt::Tensor>{}); }, {"empty parameter list"});
  // A gradient with another dtype than its parameter.
  optim::SGD o({{"w", p}});
  p.set_grad(mt::zeros({kN}, {.dtype = mt::kBFloat16}));
  expect_error([&] { o.step(); }, {"the gradient of w is [6] bfloat16"});
}

TEST(Optimizer, StepAcceptsStridedGradientsAndIsThreadCountIndependent) {
  // A transposed gradient is read in the parameter's element order.
  mt::Tensor p = mt::zeros({2, 3});
  p.requires_grad_();
  mt::Tensor gt = mt::from_vector(std::vector<float>{1, 4, 2, 5, 3, 6}, {3, 2});
  p.set_grad(gt.t());
  optim::SGD opt({p}, {.lr = 1.0});
  opt.step();
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{-1, -2, -3, -4, -5, -6}));
  // A large multi-chunk parameter gives the same bits with 1 and several threads.
  auto run_with = [](int threads) {
    return mt::testing::with_threads(threads, [] {
      mt::Generator g(5);
      mt::Tensor q = mt::randn({100003}, {}, &g);
      q.requires_grad_();
      optim::Adam o({q}, {.lr = 0.1, .amsgrad = true});
      for (int t = 0; t < 3; ++t) {
        q.set_grad(mt::randn({100003}, {}, &g));
        o.step();
      }
      return q.to_vector<float>();
    });
  };
  std::vector<float> one = run_with(1), four = run_with(4);
  EXPECT_EQ(one, four);
}
