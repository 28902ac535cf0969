// The hooks that data parallelism plugs into: post-accumulate-grad hooks on leaves, the Trainer's
// after-backward hook and the GradScaler's found_inf reduction point.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mixtrain/mixtrain.h"
#include "support/expect_error.h"

namespace mt = mixtrain;

namespace {

mt::Tensor leaf(std::vector<float> v) {
  mt::Tensor t = mt::from_vector(v, {static_cast<int64_t>(v.size())});
  t.requires_grad_();
  return t;
}

}  // namespace

TEST(PostAccumulateGradHook, RunsOncePerBackwardAfterTheGradientIsComplete) {
  // a is used twice: its hook must see the sum of both contributions, once.
  mt::Tensor a = leaf({1, 2}), b = leaf({3, 4});
  std::vector<std::string> order;
  std::vector<std::vector<float>> seen;
  a.register_post_accumulate_grad_hook([&](const mt::Tensor& t) {
    order.push_back("a");
    seen.push_back(t.grad().to_vector<float>());
  });
  b.register_post_accumulate_grad_hook([&](const mt::Tensor&) { order.push_back("b"); });
  mt::sum(mt::mul(a, b) + mt::mul(a, 2.0)).backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<float>{5, 6}));  // b + 2
  EXPECT_EQ(order.size(), 2u);
  // A second backward accumulates (a.grad += ...) and runs the hook again with the total.
  mt::sum(mt::mul(a, 3.0)).backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], (std::vector<float>{8, 9}));
}

TEST(PostAccumulateGradHook, CanBeRemovedAndIsOnlyForLeaves) {
  mt::Tensor a = leaf({1});
  int calls = 0;
  const uint64_t id = a.register_post_accumulate_grad_hook([&](const mt::Tensor&) { ++calls; });
  const uint64_t id2 = a.register_post_accumulate_grad_hook([&](const mt::Tensor&) { calls += 10; });
  mt::sum(a).backward();
  EXPECT_EQ(calls, 11);
  a.remove_post_accumulate_grad_hook(id);
  mt::sum(a).backward();
  EXPECT_EQ(calls, 21);
  a.remove_post_accumulate_grad_hook(id2);
  mt::sum(a).backward();
  EXPECT_EQ(calls, 21);
  // autograd::grad accumulates nothing, so no hook runs.
  a.register_post_accumulate_grad_hook([&](const mt::Tensor&) { ++calls; });
  mt::autograd::grad({mt::sum(a)}, {a});
  EXPECT_EQ(calls, 21);

  EXPECT_MT_ERROR(mt::mul(a, 2.0).register_post_accumulate_grad_hook([](const mt::Tensor&) {}), "not a leaf");
  EXPECT_MT_ERROR(mt::zeros({1}).register_post_accumulate_grad_hook([](const mt::Tensor&) {}), "not a leaf");
}

TEST(TrainerHooks, AfterBackwardRunsEveryStepWithTheGradients) {
  const mt::data::SyntheticDataset data(64, {4}, 3, 1);
  mt::manual_seed(1);
  mt::nn::Sequential model(mt::nn::Linear(4, 8), mt::nn::ReLU(), mt::nn::Linear(8, 3));
  mt::train::TrainerOptions o;
  o.batch_size = 16;
  o.max_steps = 5;
  int calls = 0, with_grads = 0;
  o.after_backward = [&] {
    ++calls;
    with_grads += model.parameters()[0].grad().defined();
  };
  mt::train::Trainer trainer(model, mt::train::adamw(), data, nullptr, o);
  trainer.fit();
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(with_grads, 5);
}

TEST(GradScalerHooks, AReducedFoundInfSkipsTheStepAndBacksOff) {
  // What a process group does when another process saw an inf: this process's gradients are finite,
  // the reduction reports one anyway, and the step is skipped with the same scale update.
  const mt::data::SyntheticDataset data(64, {4}, 3, 1);
  mt::manual_seed(1);
  mt::nn::Sequential model(mt::nn::Linear(4, 8), mt::nn::ReLU(), mt::nn::Linear(8, 3));
  mt::train::TrainerOptions o;
  o.precision = {.precision = mt::train::Precision::kFp16};
  o.batch_size = 16;
  o.max_steps = 4;
  int reductions = 0;
  o.precision.scaler_options.reduce_found_inf = [&](const mt::Tensor& found_inf) {
    EXPECT_EQ(found_inf.item<float>(), 0.0f);  // locally clean
    if (++reductions == 3) {
      mt::NoGradGuard no_grad;
      mt::Tensor f = found_inf;  // a handle to the same storage
      f.fill_(1.0);
    }
  };
  std::vector<bool> skipped;
  std::vector<double> scales;
  o.on_step = [&](const mt::train::StepInfo& i) {
    skipped.push_back(i.skipped);
    scales.push_back(i.scale);
  };
  mt::train::Trainer trainer(model, mt::train::adamw(), data, nullptr, o);
  const mt::train::TrainSummary s = trainer.fit();
  EXPECT_EQ(reductions, 4);
  EXPECT_EQ(skipped, (std::vector<bool>{false, false, true, false}));
  EXPECT_EQ(scales, (std::vector<double>{65536, 65536, 65536, 32768}));
  EXPECT_EQ(s.skipped_steps, 1);
}
