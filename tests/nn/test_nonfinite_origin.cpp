// NonFiniteOrigin (nn/nonfinite_origin.h): the first op making inf/NaN from finite inputs, forward
// (log of a negative, an fp16 product overflowing under autocast) and backward (sqrt's gradient at
// 0), a non-finite leaf input, module paths, steps, nothing reported for finite runs, the observer's
// removal, and the Trainer's divergence error naming the origin.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/nn/modules.h"
#include "mixtrain/nn/nonfinite_origin.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
namespace nn = mixtrain::nn;
namespace tr = mixtrain::train;

namespace {

// y = f(x) for an elementwise f: the ops under test inside a module of their own.
class Elementwise : public nn::Module {
 public:
  explicit Elementwise(mt::Tensor (*f)(const mt::Tensor&)) : Module("Elementwise"), f_(f) {}
  mt::Tensor forward(const mt::Tensor& x) override { return f_(x); }

 private:
  mt::Tensor (*f_)(const mt::Tensor&);
};

mt::Tensor shifted_log(const mt::Tensor& x) { return mt::log(x - 10.0); }  // NaN for x < 10
mt::Tensor relu_sqrt(const mt::Tensor& x) { return mt::sqrt(mt::relu(x)); }  // gradient inf at x <= 0

// Linear(4, 4) with weights 1 and bias 0, then `tail`: model "0" is the Linear, "1" the tail.
std::shared_ptr<nn::Sequential> model_with(mt::Tensor (*tail)(const mt::Tensor&)) {
  auto m = std::make_shared<nn::Sequential>(nn::Linear(4, 4), Elementwise(tail));
  mt::NoGradGuard no_grad;
  for (mt::Tensor& p : m->parameters()) p.fill_(0.0);
  m->parameters()[0].fill_(1.0);
  return m;
}

mt::Tensor input(float v) { return mt::full({2, 4}, v); }

}  // namespace

TEST(NonFiniteOrigin, NamesTheForwardOpItsModuleAndTheStep) {
  auto model = model_with(shifted_log);
  nn::NonFiniteOrigin origin(*model);
  origin.begin_step(7);
  mt::sum((*model)(input(1.0f))).backward();  // linear gives 4, log(4 - 10) is NaN
  ASSERT_TRUE(origin.found());
  const nn::NonFiniteOriginReport r = *origin.report();
  EXPECT_EQ(r.step, 7);
  EXPECT_EQ(r.op, "log");
  EXPECT_FALSE(r.backward);
  EXPECT_FALSE(r.leaf_input);
  EXPECT_EQ(r.scope, "1");
  EXPECT_TRUE(std::isnan(r.value));
  EXPECT_EQ(r.element, 0);
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_NE(r.inputs[0].find("[2, 4]"), std::string::npos) << r.inputs[0];
  const std::string text = r.to_string();
  EXPECT_NE(text.find("step 7: the forward of 'log' in module '1' produced NaN"), std::string::npos) << text;
  // begin_step forgets it; a finite step reports nothing.
  origin.begin_step(8);
  EXPECT_FALSE(origin.found());
  mt::sum((*model)(input(4.0f))).backward();  // log(16 - 10)
  EXPECT_FALSE(origin.found());
}

TEST(NonFiniteOrigin, NamesABackwardOp) {
  auto model = model_with(relu_sqrt);
  nn::NonFiniteOrigin origin(*model);
  origin.begin_step(1);
  mt::Tensor y = (*model)(input(-1.0f));  // linear gives -4, relu 0, sqrt 0: all finite
  EXPECT_FALSE(origin.found());
  mt::sum(y).backward();  // d sqrt(u) / du = 1 / (2 sqrt(0)) = inf
  ASSERT_TRUE(origin.found());
  const nn::NonFiniteOriginReport r = *origin.report();
  EXPECT_EQ(r.op, "sqrt");
  EXPECT_TRUE(r.backward);
  EXPECT_EQ(r.scope, "1");
  EXPECT_TRUE(std::isinf(r.value));
  EXPECT_NE(r.to_string().find("the backward of 'sqrt' in module '1' produced inf"), std::string::npos)
      << r.to_string();
}

TEST(NonFiniteOrigin, NamesAnFp16ProductThatOverflowsUnderAutocast) {
  auto model = model_with(relu_sqrt);
  nn::NonFiniteOrigin origin(*model);
  origin.begin_step(1);
  mt::Tensor y;
  {
    mt::amp::Autocast autocast(mt::kCPU, mt::kFloat16);
    y = (*model)(input(30000.0f));  // 4 * 30000 > 65504: the fp16 linear overflows
  }
  ASSERT_TRUE(origin.found());
  const nn::NonFiniteOriginReport r = *origin.report();
  EXPECT_EQ(r.op, "linear");
  EXPECT_FALSE(r.backward);
  EXPECT_EQ(r.scope, "0");
  EXPECT_EQ(r.value, std::numeric_limits<double>::infinity());
  ASSERT_FALSE(r.outputs.empty());
  EXPECT_NE(r.outputs[0].find("float16"), std::string::npos) << r.outputs[0];
}

TEST(NonFiniteOrigin, NamesANonFiniteLeafInput) {
  auto model = model_with(relu_sqrt);
  nn::NonFiniteOrigin origin(*model);
  origin.begin_step(3);
  std::vector<float> values(8, 1.0f);
  values[5] = std::numeric_limits<float>::quiet_NaN();
  mt::Tensor x = mt::from_vector(values, {2, 4});
  x.requires_grad_();  // the graph starts at x: the linear records a node and is observed
  (*model)(x);
  ASSERT_TRUE(origin.found());
  const nn::NonFiniteOriginReport r = *origin.report();
  EXPECT_TRUE(r.leaf_input);
  EXPECT_EQ(r.op, "linear");
  EXPECT_EQ(r.index, 0);
  EXPECT_EQ(r.element, 5);
  EXPECT_NE(r.to_string().find("leaf tensor"), std::string::npos) << r.to_string();
}

TEST(NonFiniteOrigin, ObservesNothingOnceDestroyed) {
  auto model = model_with(shifted_log);
  {
    nn::NonFiniteOrigin origin(*model);
    EXPECT_TRUE(mt::autograd::has_op_observers());
  }
  EXPECT_FALSE(mt::autograd::has_op_observers());
  EXPECT_EQ(model->named_children()[1].second->scope_name(), "1");
}

TEST(NonFiniteOrigin, TheTrainersDivergenceErrorNamesTheOrigin) {
  static const mt::data::SyntheticDataset data(64, {1, 4, 4}, 4, /*seed=*/3);
  mt::manual_seed(1);
  auto model = std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(16, 4));
  tr::TrainerOptions o;
  o.batch_size = 16;
  o.max_steps = 4;
  o.timing_warmup_steps = 0;
  o.find_nonfinite_origin = true;
  auto calls = std::make_shared<int>(0);
  o.loss_fn = [calls](const mt::Tensor& out, const mt::Tensor& target) {
    const mt::Tensor loss = tr::default_loss(out, target);
    return ++*calls == 3 ? mt::log(loss - 1000.0) : loss;  // NaN at step 3
  };
  tr::Trainer trainer(*model, tr::adamw(1e-2, 0.0), data, nullptr, o);
  const mt::testing::Caught c = mt::testing::catch_error([&] { trainer.fit(); });
  EXPECT_NE(c.message.find("training diverged at step 3"), std::string::npos) << c.message;
  // The Trainer runs the loss in a scope of its own, "loss": the loss function's ops are named so.
  EXPECT_NE(c.message.find("Origin: step 3: the forward of 'log' in module 'loss' produced NaN"),
            std::string::npos)
      << c.message;
}
