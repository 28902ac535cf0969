// Learning-rate schedulers: the lr sequences of StepLR, CosineAnnealingLR, LinearWarmup and a
// warmup-then-cosine SequentialLR, per group, against their closed forms written out here.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numbers>

#include "mixtrain/mixtrain.h"
#include "mixtrain/optim/lr_scheduler.h"
#include "mixtrain/optim/sgd.h"

namespace mt = mixtrain;
namespace optim = mixtrain::optim;

namespace {

mt::Tensor param() {
  mt::Tensor p = mt::zeros({2});
  p.requires_grad_();
  return p;
}

// lrs of group `g` for epochs 0..n-1 (the constructor sets epoch 0).
std::vector<double> sequence(optim::LRScheduler& s, optim::Optimizer& opt, int n, size_t g = 0) {
  std::vector<double> out{opt.lr(g)};
  for (int i = 1; i < n; ++i) {
    s.step();
    EXPECT_EQ(s.get_last_lr()[g], opt.lr(g));
    out.push_back(opt.lr(g));
  }
  return out;
}

void expect_seq(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12 * std::max(1.0, std::abs(want[i]))) << i;
}

}  // namespace

TEST(LRScheduler, StepLR) {
  optim::SGD opt({param()}, {.lr = 1.0});
  optim::StepLR s(opt, 2, 0.1);
  expect_seq(sequence(s, opt, 7), {1, 1, 0.1, 0.1, 0.01, 0.01, 0.001});
  EXPECT_EQ(s.last_epoch(), 6);
}

TEST(LRScheduler, CosineAnnealingPerGroup) {
  optim::SGD opt(std::vector<optim::ParamGroupSpec<optim::SGDOptions>>{{.params = {param()}, .options = {.lr = 0.1}},
                                                                       {.params = {param()}, .options = {.lr = 0.02}}});
  optim::CosineAnnealingLR s(opt, 4, 0.001);
  std::vector<double> g0, g1;
  g0.push_back(opt.lr(0));
  g1.push_back(opt.lr(1));
  for (int i = 1; i <= 4; ++i) {
    s.step();
    g0.push_back(opt.lr(0));
    g1.push_back(opt.lr(1));
  }
  auto want = [](double base) {
    std::vector<double> v;
    for (int t = 0; t <= 4; ++t) v.push_back(0.001 + (base - 0.001) * (1 + std::cos(std::numbers::pi * t / 4)) / 2);
    return v;
  };
  expect_seq(g0, want(0.1));
  expect_seq(g1, want(0.02));
  EXPECT_NEAR(g0.back(), 0.001, 1e-15);
}

TEST(LRScheduler, LinearWarmupThenCosine) {
  optim::SGD opt({param()}, {.lr = 0.5});
  auto warmup = std::make_shared<optim::LinearWarmup>(opt, 4);
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(opt, 4);
  EXPECT_EQ(*opt.initial_lr(0), 0.5);  // recorded once, shared by all schedulers
  optim::SequentialLR s(opt, {warmup, cosine}, {4});
  std::vector<double> want = {0, 0.125, 0.25, 0.375};
  for (int t = 0; t <= 4; ++t) want.push_back(0.5 * (1 + std::cos(std::numbers::pi * t / 4)) / 2);
  expect_seq(sequence(s, opt, 9), want);
  // Resuming at an epoch sets the same lr as stepping there.
  s.set_last_epoch(2);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.25);
  EXPECT_THROW({ optim::SequentialLR bad(opt, {warmup, cosine}, {}); }, mt::Error);
}

TEST(LRScheduler, WarmupWithStartFactorAndSteppingBeforeTheOptimizer) {
  optim::SGD opt({param()}, {.lr = 1.0});
  optim::LinearWarmup s(opt, 2, 0.5);
  // Stepping the scheduler with no optimizer step in between is fine.
  expect_seq(sequence(s, opt, 4), {0.5, 0.75, 1.0, 1.0});
}
