// Master-weight mode (b): 16-bit parameters with fp32 masters held by the optimizer. The master
// follows exactly the fp32 trajectory, small updates survive, state dicts carry the masters, the
// byte accounting, and a small MLP trained 200 steps in bf16-params + fp32-master mode against the
// default mode (a), fp32 parameters under bf16 autocast, and in mode (c) (packed masters, bf16 first
// moment).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <iostream>
#include <memory>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/optim/adam.h"
#include "mixtrain/optim/sgd.h"
#include "support/tolerances.h"
#include "support/checked_device.h"

namespace mt = mixtrain;
namespace optim = mixtrain::optim;
namespace F = mixtrain::nn::functional;

namespace {

mt::Tensor leaf(mt::Tensor t) {
  t.requires_grad_();
  return t;
}

// Values rounded to `dtype` (so that fp32 and 16-bit runs start from the same numbers).
std::vector<float> rounded(const std::vector<float>& v, mt::DType dtype) {
  return mt::from_vector(v, {static_cast<int64_t>(v.size())}, {.dtype = dtype}).to_vector<float>();
}

std::vector<float> values(int n, int seed) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(0.37 * i + seed) * 0.8);
  return v;
}

}  // namespace

TEST(MasterWeights, SmallUpdatesSurviveInTheMaster) {
  // lr * grad = 1e-3 is below half an ulp of bf16 at 1.0 (2^-8 / 2): a bf16 parameter updated directly
  // never moves; with an fp32 master it moves by 1e-3 per step and the parameter follows, rounded.
  for (bool master : {true, false}) {
    SCOPED_TRACE(master ? "with master" : "without master");
    mt::Tensor p = leaf(mt::ones({4}, {.dtype = mt::kBFloat16}));
    optim::SGD opt({p}, {.lr = 1e-3, .master_weights = master});
    EXPECT_EQ(opt.state(0).master.defined(), master);
    for (int t = 0; t < 10; ++t) {
      p.set_grad(mt::ones({4}, {.dtype = mt::kBFloat16}));
      opt.step();
    }
    if (master) {
      float m = 1.0f;
      for (int t = 0; t < 10; ++t) m = m + (-1e-3f) * 1.0f;
      EXPECT_EQ(opt.state(0).master.to_vector<float>()[0], m);
      EXPECT_EQ(p.to_vector<float>()[0], static_cast<float>(mt::bfloat16(m)));
      EXPECT_LT(p.to_vector<float>()[0], 1.0f);
    } else {
      EXPECT_EQ(p.to_vector<float>()[0], 1.0f);
    }
  }
}

TEST(MasterWeights, MasterFollowsTheFp32TrajectoryBitForBit) {
  // Same starting values and the same gradients (16-bit representable): the fp32 master of a 16-bit
  // parameter is updated with exactly the arithmetic of an fp32 parameter.
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(const mt::Tensor&)>;
  const std::vector<std::pair<const char*, Factory>> kinds = {
      {"AdamW amsgrad",
       [](const mt::Tensor& p) {
         return std::make_unique<optim::AdamW>(std::vector<mt::Tensor>{p},
                                               optim::AdamOptions{.lr = 1e-2, .amsgrad = true});
       }},
      {"SGD nesterov",
       [](const mt::Tensor& p) {
         return std::make_unique<optim::SGD>(
             std::vector<mt::Tensor>{p},
             optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
       }},
  };
  for (mt::DType dtype : {mt::kBFloat16, mt::kFloat16}) {
    for (const auto& [kind, make] : kinds) {
      SCOPED_TRACE(std::string(mt::to_string(dtype)) + " " + kind);
      const int n = 40000;  // several chunks
      std::vector<float> init = rounded(values(n, 1), dtype);
      mt::Tensor p32 = leaf(mt::from_vector(init, {n}));
      mt::Tensor p16 = leaf(mt::from_vector(init, {n}, {.dtype = dtype}));
      auto o32 = make(p32), o16 = make(p16);
      for (int t = 0; t < 4; ++t) {
        std::vector<float> g = rounded(values(n, 10 + t), dtype);
        p32.set_grad(mt::from_vector(g, {n}));
        p16.set_grad(mt::from_vector(g, {n}, {.dtype = dtype}));
        o32->step();
        o16->step();
      }
      std::vector<float> master = o16->state(0).master.to_vector<float>();
      EXPECT_EQ(master, p32.to_vector<float>());
      EXPECT_EQ(p16.to_vector<float>(), rounded(master, dtype));
    }
  }
}

TEST(MasterWeights, StateDictCarriesMastersAndStateBytes) {
  const int n = 100;
  mt::Tensor p = leaf(mt::from_vector(values(n, 2), {n}, {.dtype = mt::kBFloat16}));
  optim::Adam opt({p}, {.lr = 1e-2});
  // Masters exist from construction; moments from the first step.
  EXPECT_EQ(opt.state_bytes().masters, 4 * n);
  EXPECT_EQ(opt.state_bytes().moments, 0);
  p.set_grad(mt::from_vector(values(n, 3), {n}, {.dtype = mt::kBFloat16}));
  opt.step();
  EXPECT_EQ(opt.state_bytes().moments, 8 * n);
  EXPECT_EQ(opt.state_bytes().total(), 12 * n);
  optim::OptimizerStateDict sd = opt.state_dict();
  ASSERT_TRUE(sd.state[0].master.defined());
  EXPECT_EQ(sd.state[0].named_tensors()[0].first, "master");

  // A fresh optimizer over a parameter with other values: loading restores the master and writes it
  // (rounded) into the parameter.
  mt::Tensor q = leaf(mt::zeros({n}, {.dtype = mt::kBFloat16}));
  optim::Adam other({q}, {.lr = 1e-2});
  other.load_state_dict(sd);
  EXPECT_EQ(other.state(0).master.to_vector<float>(), opt.state(0).master.to_vector<float>());
  EXPECT_EQ(q.to_vector<float>(), p.to_vector<float>());
  // Master-weight mode must match.
  mt::Tensor r = leaf(mt::zeros({n}, {.dtype = mt::kBFloat16}));
  optim::Adam no_master({r}, {.master_weights = false});
  EXPECT_THROW(no_master.load_state_dict(sd), mt::Error);
  // sync_masters_from_params after changing the parameter outside the optimizer.
  {
    mt::NoGradGuard no_grad;
    q.fill_(0.5);
  }
  other.sync_masters_from_params();
  EXPECT_EQ(other.state(0).master.to_vector<float>()[7], 0.5f);
}

namespace {

// A 16 -> 32 -> 4 MLP from raw tensors.
struct Mlp {
  mt::Tensor w1, b1, w2, b2;
  mt::Tensor operator()(const mt::Tensor& x) const { return mt::linear(mt::relu(mt::linear(x, w1, b1)), w2, b2); }
  std::vector<mt::Tensor> params() const { return {w1, b1, w2, b2}; }
  Mlp to(mt::DType dtype) const {
    // clone(): to() returns the tensor itself when the dtype already matches.
    auto c = [&](const mt::Tensor& t) { return leaf(t.detach().to(dtype).clone()); };
    return {c(w1), c(b1), c(w2), c(b2)};
  }
};

Mlp make_mlp(mt::Generator& gen) {
  auto u = [&](const mt::Shape& s, int64_t fan_in) {
    mt::Tensor t = mt::empty(s);
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    mt::uniform_(t, -bound, bound, &gen);
    return leaf(t);
  };
  return {u({32, 16}, 16), u({32}, 16), u({4, 32}, 32), u({4}, 32)};
}

double eval_loss(const Mlp& m, const mt::Tensor& x, const mt::Tensor& y) {
  mt::NoGradGuard no_grad;
  return F::cross_entropy(m.to(mt::kFloat32)(x), y).item<double>();
}

}  // namespace

TEST(MasterWeights, MlpBf16ParamsWithFp32MastersTrainsLikeFp32) {
  mt::Generator gen(2024);
  const mt::Tensor x = mt::randn({1024, 16}, {}, &gen);
  const mt::Tensor teacher = mt::randn({4, 16}, {}, &gen);
  // A teacher's labels with noise: learnable, but not to zero loss, so the comparison below means something.
  const mt::Tensor y = mt::argmax(mt::add(mt::linear(x, teacher), mt::mul(mt::randn({1024, 4}, {}, &gen), 2.0)), 1);
  const Mlp init = make_mlp(gen);
  const int kSteps = 200;

  // Mode (a): fp32 parameters, forward + loss under bf16 autocast.
  Mlp a = init.to(mt::kFloat32);
  optim::Adam opt_a(a.params(), {.lr = 1e-2});
  for (int t = 0; t < kSteps; ++t) {
    opt_a.zero_grad();
    mt::Tensor loss;
    {
      mt::amp::Autocast ac(mt::testing::test_device().type, mt::kBFloat16);
      loss = F::cross_entropy(a(x), y);
    }
    loss.backward();
    opt_a.step();
  }

  // Mode (b): bf16 parameters and activations, fp32 masters in the optimizer.
  Mlp b = init.to(mt::kBFloat16);
  const mt::Tensor xb = x.to(mt::kBFloat16);
  optim::Adam opt_b(b.params(), {.lr = 1e-2});
  for (int t = 0; t < kSteps; ++t) {
    opt_b.zero_grad();
    F::cross_entropy(b(xb), y).backward();
    opt_b.step();
  }

  // Mode (c): as (b), with the masters packed into the bf16 parameters + lower halves and a bf16
  // first moment (12 bytes of model state per parameter instead of 16).
  Mlp c = init.to(mt::kBFloat16);
  optim::Adam opt_c(c.params(), {.lr = 1e-2, .packed_master = true, .exp_avg_dtype = mt::kBFloat16});
  for (int t = 0; t < kSteps; ++t) {
    opt_c.zero_grad();
    F::cross_entropy(c(xb), y).backward();
    opt_c.step();
  }
  ASSERT_TRUE(opt_c.has_packed_masters());

  const double initial = eval_loss(init, x, y), loss_a = eval_loss(a, x, y), loss_b = eval_loss(b, x, y);
  const double loss_c = eval_loss(c, x, y);
  std::cout << "[ MLP      ] cross-entropy: initial " << initial << ", (a) fp32+autocast " << loss_a
            << ", (b) bf16+fp32 masters " << loss_b << ", (c) bf16+packed masters+bf16 m " << loss_c << "\n";
  EXPECT_LT(loss_a, 0.5 * initial);
  EXPECT_LT(loss_b, 0.5 * initial);
  EXPECT_LT(loss_c, 0.5 * initial);
  // Modes (b) and (c) end within kBf16ParamsTrainingLoss of mode (a)'s training loss.
  const mt::testing::Tolerance tol = mt::testing::kBf16ParamsTrainingLoss;
  // Mode (c) against mode (a). Measured here: (c) 0.2206 against (a) 0.2214 (0.3%). (c) differs
  // from (b) by the forward seeing truncated instead of rounded weights and by m's bf16 rounding.
  EXPECT_LT(std::abs(loss_c - loss_a), tol.atol + tol.rtol * loss_a);
  // Mode (b) against mode (a). Measured here: initial 1.445, (a) 0.221, (b) 0.206 (a 7% difference).
  // Both run the same fp32 Adam update; they differ by where bf16 rounding happens: (b) stores the
  // weights and gradients in bf16, (a) rounds the weights to bf16 for each forward and keeps fp32
  // gradients.
  EXPECT_LT(std::abs(loss_b - loss_a), tol.atol + tol.rtol * loss_a);
}

TEST(MasterWeights, MemoryOfBf16ParamsPlusMastersVsFp32ParamsPlusGrads) {
  // N = 16*32 + 32 + 32*4 + 4 = 676 parameter elements.
  //   mode (b): bf16 params 2N = 1352 bytes + fp32 masters 4N = 2704 bytes = 4056 bytes
  //   mode (a): fp32 params 4N = 2704 bytes + fp32 grads 4N = 2704 bytes   = 5408 bytes
  // Honest totals: mode (b) also holds bf16 grads (2N = 1352), so params + grads + masters = 5408
  // bytes, the same as mode (a)'s params + grads; Adam's moments add 8N = 5408 to both. The saving of
  // 16-bit training is in the activations (and, against autocast, in the per-forward bf16 weight
  // copies, 2N), not in the weights.
  const int64_t N = 676;
  mt::Generator gen(1);
  const Mlp init = make_mlp(gen);
  const int64_t before_b = mt::memory::stats(mixtrain::testing::test_device()).current_bytes;
  Mlp b = init.to(mt::kBFloat16);
  const int64_t params_b = mt::memory::stats(mixtrain::testing::test_device()).current_bytes - before_b;
  optim::Adam opt_b(b.params());
  const int64_t with_masters_b = mt::memory::stats(mixtrain::testing::test_device()).current_bytes - before_b;
  EXPECT_EQ(params_b, 2 * N);
  EXPECT_EQ(with_masters_b, 6 * N);
  EXPECT_EQ(opt_b.state_bytes().masters, 4 * N);

  const int64_t before_a = mt::memory::stats(mixtrain::testing::test_device()).current_bytes;
  Mlp a = init.to(mt::kFloat32);
  const int64_t params_a = mt::memory::stats(mixtrain::testing::test_device()).current_bytes - before_a;
  mt::Tensor x = mt::randn({8, 16}, {}, &gen);
  mt::Tensor y = mt::zeros({8}, {.dtype = mt::kInt64});
  F::cross_entropy(a(x), y).backward();
  int64_t grads_a = 0;
  for (const mt::Tensor& p : a.params()) grads_a += static_cast<int64_t>(p.grad().nbytes());
  EXPECT_EQ(params_a, 4 * N);
  EXPECT_EQ(grads_a, 4 * N);
  EXPECT_LT(with_masters_b, params_a + grads_a);  // 4056 < 5408
}
