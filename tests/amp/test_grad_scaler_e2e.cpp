// GradScaler end to end: PyTorch's _run_scaling_case harness and its cases (plain, clipping,
// clipping after an explicit unscale_, accumulation, two models / two optimizers, autocast), with
// PyTorch's numbers: scaler(init 128, growth 2, interval 1), SGD lr 1.0, MSE, four batches of 8x8
// randn, inf injected into model[1].weight.grad at iteration 2 while the control run skips that
// step -> final scale 128 * 2^3 * 0.5 = 512 and parameters equal to the control.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/amp/grad_scaler.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/optim/adam.h"
#include "mixtrain/optim/clip_grad.h"
#include "mixtrain/optim/sgd.h"
#include "support/gradcheck.h"
#include "support/checked_device.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
using mt::amp::GradScaler;
using mt::optim::Optimizer;

namespace {

constexpr int kSkipIter = 2;
constexpr float kInf = std::numeric_limits<float>::infinity();

// Sequential(Linear(8, 8), Linear(8, 8)) from raw tensors (PyTorch's default init bounds).
struct TinyModel {
  mt::Tensor w0, b0, w1, b1;

  mt::Tensor operator()(const mt::Tensor& x) const { return mt::linear(mt::linear(x, w0, b0), w1, b1); }
  std::vector<mt::Tensor> params() const { return {w0, b0, w1, b1}; }
  const mt::Tensor& layer1_weight() const { return w1; }
};

mt::Tensor leaf(mt::Tensor t) {
  t.requires_grad_();
  return t;
}

TinyModel make_model(mt::Generator& gen) {
  const double bound = 1.0 / std::sqrt(8.0);
  auto u = [&](const mt::Shape& s) {
    mt::Tensor t = mt::empty(s);
    mt::uniform_(t, -bound, bound, &gen);
    return leaf(t);
  };
  TinyModel m;
  m.w0 = u({8, 8});
  m.b0 = u({8});
  m.w1 = u({8, 8});
  m.b1 = u({8});
  return m;
}

TinyModel copy_of(const TinyModel& m) {
  auto c = [](const mt::Tensor& t) { return leaf(t.detach().clone()); };
  return {c(m.w0), c(m.b0), c(m.w1), c(m.b1)};
}

struct Batch {
  mt::Tensor input, target;
};

std::vector<Batch> make_data() {
  mt::Generator gen(7);
  std::vector<Batch> data;
  for (int i = 0; i < 4; ++i) data.push_back({mt::randn({8, 8}, {}, &gen), mt::randn({8, 8}, {}, &gen)});
  return data;
}

using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(std::vector<mt::Tensor>)>;

std::unique_ptr<Optimizer> make_sgd(std::vector<mt::Tensor> p) {
  return std::make_unique<mt::optim::SGD>(std::move(p), mt::optim::SGDOptions{.lr = 1.0});
}

// One training run: the scaled run when try_scaling_api, else the control run.
using Body = std::function<void(const std::vector<Batch>& data, TinyModel& model, Optimizer& opt, GradScaler& scaler,
                                bool try_scaling_api)>;

void expect_models_equal(const TinyModel& a, const TinyModel& b, double atol) {
  std::vector<mt::Tensor> pa = a.params(), pb = b.params();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_CLOSE(pa[i], pb[i], (mt::testing::Tolerance{1e-5, atol})) << "param " << i;
}

// PyTorch's _run_scaling_case: enabled and disabled, control vs scaled.
void run_scaling_case(const Body& body, int unskipped, int skipped, double atol = 1e-7,
                      const OptimizerFactory& make_opt = make_sgd) {
  for (bool enabled : {true, false}) {
    SCOPED_TRACE(enabled ? "scaler enabled" : "scaler disabled");
    mt::Generator gen(3);
    TinyModel control = make_model(gen);
    TinyModel scaling = copy_of(control);
    std::unique_ptr<Optimizer> opt_control = make_opt(control.params());
    std::unique_ptr<Optimizer> opt_scaling = make_opt(scaling.params());
    const std::vector<Batch> data = make_data();
    GradScaler scaler({.init_scale = 128.0, .growth_factor = 2.0, .growth_interval = 1, .enabled = enabled});
    body(data, control, *opt_control, scaler, false);
    body(data, scaling, *opt_scaling, scaler, true);
    if (enabled)
      EXPECT_EQ(scaler.get_scale(), 128.0 * std::pow(2.0, unskipped) * std::pow(0.5, skipped));
    else
      EXPECT_EQ(scaler.get_scale(), 1.0);
    expect_models_equal(control, scaling, atol);
  }
}

void inject_inf(const TinyModel& m) { m.layer1_weight().grad().fill_(kInf); }

// The plain loop, optionally under autocast.
Body plain_body(std::optional<mt::DType> autocast_dtype = std::nullopt) {
  return [autocast_dtype](const std::vector<Batch>& data, TinyModel& model, Optimizer& opt, GradScaler& scaler,
                          bool try_scaling_api) {
    for (int i = 0; i < static_cast<int>(data.size()); ++i) {
      opt.zero_grad();
      mt::Tensor loss;
      {
        mt::amp::Autocast ac(mt::testing::test_device().type, autocast_dtype, autocast_dtype.has_value());
        loss = F::mse_loss(model(data[i].input), data[i].target);
      }
      if (try_scaling_api) {
        scaler.scale(loss).backward();
        if (i == kSkipIter && scaler.is_enabled()) inject_inf(model);
        scaler.step(opt);
        scaler.update();
      } else {
        loss.backward();
        if (!scaler.is_enabled() || i != kSkipIter) opt.step();
      }
    }
  };
}

}  // namespace

TEST(GradScalerE2E, Plain) { run_scaling_case(plain_body(), 3, 1); }

TEST(GradScalerE2E, PlainAdamAndAdamW) {
  run_scaling_case(plain_body(), 3, 1, 1e-6, [](std::vector<mt::Tensor> p) -> std::unique_ptr<Optimizer> {
    return std::make_unique<mt::optim::Adam>(std::move(p), mt::optim::AdamOptions{.lr = 1e-2});
  });
  run_scaling_case(plain_body(), 3, 1, 1e-6, [](std::vector<mt::Tensor> p) -> std::unique_ptr<Optimizer> {
    return std::make_unique<mt::optim::AdamW>(std::move(p), mt::optim::AdamOptions{.lr = 1e-2, .amsgrad = true});
  });
}

TEST(GradScalerE2E, Clipping) {
  run_scaling_case(
      [](const std::vector<Batch>& data, TinyModel& model, Optimizer& opt, GradScaler& scaler, bool try_scaling_api) {
        const double max_norm = 0.2;  // a value that actually clips
        for (int i = 0; i < static_cast<int>(data.size()); ++i) {
          opt.zero_grad();
          mt::Tensor loss = F::mse_loss(model(data[i].input), data[i].target);
          if (try_scaling_api) {
            scaler.scale(loss).backward();
            mt::optim::clip_grad_norm_(model.params(), max_norm * scaler.get_scale());
            if (i == kSkipIter && scaler.is_enabled()) inject_inf(model);
            scaler.step(opt);
            scaler.update();
          } else {
            loss.backward();
            mt::optim::clip_grad_norm_(model.params(), max_norm);
            if (!scaler.is_enabled() || i != kSkipIter) opt.step();
          }
        }
      },
      3, 1, 1e-5);
}

TEST(GradScalerE2E, ClippingSeparateUnscale) {
  run_scaling_case(
      [](const std::vector<Batch>& data, TinyModel& model, Optimizer& opt, GradScaler& scaler, bool try_scaling_api) {
        const double max_norm = 0.2;
        for (int i = 0; i < static_cast<int>(data.size()); ++i) {
          opt.zero_grad();
          mt::Tensor loss = F::mse_loss(model(data[i].input), data[i].target);
          if (try_scaling_api) {
            scaler.scale(loss).backward();
            if (i == kSkipIter && scaler.is_enabled()) inject_inf(model);
            scaler.unscale_(opt);
            mt::optim::clip_grad_norm_(model.params(), max_norm, 2.0, /*error_if_nonfinite=*/false);
            scaler.step(opt);
            scaler.update();
          } else {
            loss.backward();
            mt::optim::clip_grad_norm_(model.params(), max_norm);
            if (!scaler.is_enabled() || i != kSkipIter) opt.step();
          }
        }
      },
      3, 1);
}

TEST(GradScalerE2E, Accumulation) {
  run_scaling_case(
      [](const std::vector<Batch>& data, TinyModel& model, Optimizer& opt, GradScaler& scaler, bool try_scaling_api) {
        const int iters_to_accumulate = 2;
        for (int i = 0; i < static_cast<int>(data.size()); ++i) {
          mt::Tensor loss = F::mse_loss(model(data[i].input), data[i].target) / iters_to_accumulate;
          if (try_scaling_api)
            scaler.scale(loss).backward();
          else
            loss.backward();
          if ((i + 1) % iters_to_accumulate == 0) {
            if (try_scaling_api) {
              scaler.step(opt);
              scaler.update();
            } else {
              opt.step();
            }
            opt.zero_grad();
          }
        }
      },
      2, 0);
}

TEST(GradScalerE2E, MultipleModelsAndOptimizers) {
  // Two models, two optimizers, one scaler: one backoff for the iteration, only opt1 skips.
  for (bool enabled : {true, false}) {
    SCOPED_TRACE(enabled ? "scaler enabled" : "scaler disabled");
    mt::Generator gen(11);
    TinyModel c0 = make_model(gen), c1 = make_model(gen);
    TinyModel s0 = copy_of(c0), s1 = copy_of(c1);
    const std::vector<Batch> data = make_data();
    GradScaler scaler({.init_scale = 128.0, .growth_factor = 2.0, .growth_interval = 1, .enabled = enabled});
    auto run = [&](TinyModel& m0, TinyModel& m1, bool try_scaling_api) {
      mt::optim::SGD opt0(m0.params(), {.lr = 1.0}), opt1(m1.params(), {.lr = 1.0});
      for (int i = 0; i < static_cast<int>(data.size()); ++i) {
        opt0.zero_grad();
        opt1.zero_grad();
        mt::Tensor o0 = m0(data[i].input), o1 = m1(data[i].input);
        mt::Tensor loss0 = F::mse_loss(0.3 * o0 + 0.7 * o1, data[i].target);
        mt::Tensor loss1 = F::mse_loss(0.6 * o0 - 0.4 * o1, data[i].target);
        if (try_scaling_api) {
          scaler.scale(loss0).backward(mt::Tensor(), /*retain_graph=*/true);
          scaler.scale(loss1).backward();
          if (i == kSkipIter && scaler.is_enabled()) inject_inf(m1);
          scaler.unscale_(opt0);  // as in PyTorch's test: one optimizer unscaled explicitly
          scaler.step(opt0);
          scaler.step(opt1);
          scaler.update();
        } else {
          loss0.backward(mt::Tensor(), true);
          loss1.backward();
          opt0.step();
          if (!scaler.is_enabled() || i != kSkipIter) opt1.step();
        }
      }
    };
    run(c0, c1, false);
    run(s0, s1, true);
    EXPECT_EQ(scaler.get_scale(), enabled ? 128.0 * std::pow(2.0, 3) * 0.5 : 1.0);
    expect_models_equal(c0, s0, 1e-7);
    expect_models_equal(c1, s1, 1e-7);
  }
}

TEST(GradScalerE2E, Autocast) {
  // Forward + loss under autocast (fp16, where loss scaling matters, and bf16); atol 1e-3 as in PyTorch.
  run_scaling_case(plain_body(mt::kFloat16), 3, 1, 1e-3);
  run_scaling_case(plain_body(mt::kBFloat16), 3, 1, 1e-3);
}
