// nn::Module core: registration rules, recursive dotted names in PyTorch's order, train/eval
// propagation, state_dict / load_state_dict (round trip, dtype conversion, every error path and
// its message), to(dtype) in place, zero_grad, Sequential construction and indexing, init.
#include <gtest/gtest.h>

#include <cmath>

#include "mixtrain/mixtrain.h"
#include "mixtrain/nn/modules.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
namespace nn = mixtrain::nn;
using mt::testing::error_message;

namespace {

std::vector<std::string> names_of(const std::vector<nn::NamedTensor>& v) {
  std::vector<std::string> out;
  for (const auto& [n, t] : v) out.push_back(n);
  return out;
}

// A user-defined module with a parameter, a buffer, a non-persistent buffer and a child.
class Custom : public nn::Module {
 public:
  Custom() : Module("Custom") {
    scale_ = register_parameter("scale", mt::ones({3}));
    register_buffer("counter", mt::zeros({1}));
    register_buffer("scratch", mt::zeros({2}), {.persistent = false});
    inner_ = register_module("inner", nn::Linear(3, 2));
  }
  mt::Tensor forward(const mt::Tensor& x) override { return inner_->forward(x * scale_); }
  mt::Tensor scale_;
  std::shared_ptr<nn::Linear> inner_;
};

}  // namespace

TEST(ModuleTest, RegistrationNamesAndErrors) {
  Custom m;
  EXPECT_EQ(names_of(m.named_parameters()), (std::vector<std::string>{"scale", "inner.weight", "inner.bias"}));
  EXPECT_EQ(names_of(m.named_parameters(/*recurse=*/false)), (std::vector<std::string>{"scale"}));
  EXPECT_EQ(names_of(m.named_buffers()), (std::vector<std::string>{"counter", "scratch"}));
  EXPECT_EQ(m.children().size(), 1u);
  EXPECT_EQ(m.named_children()[0].first, "inner");
  EXPECT_TRUE(m.scale_.requires_grad());
  EXPECT_EQ(m.num_parameters(), 3 + 6 + 2);
  // The non-persistent buffer is not part of the state.
  EXPECT_EQ(m.state_dict().keys(), (std::vector<std::string>{"scale", "counter", "inner.weight", "inner.bias"}));

  EXPECT_NE(error_message([&] { m.register_parameter("scale", mt::ones({1})); }).find("\"scale\""), std::string::npos);
  EXPECT_NE(error_message([&] { m.register_buffer("inner", mt::ones({1})); }).find("submodule"), std::string::npos);
  EXPECT_NE(error_message([&] { m.register_parameter("a.b", mt::ones({1})); }).find("'.'"), std::string::npos);
  EXPECT_THROW(m.register_parameter("", mt::ones({1})), mt::Error);
  EXPECT_THROW(m.register_parameter("ints", mt::zeros({1}, {.dtype = mt::kInt64})), mt::Error);
  EXPECT_THROW(m.register_module("null", std::shared_ptr<nn::Module>()), mt::Error);
  // A base Module has no forward.
  nn::Module bare;
  EXPECT_NE(error_message([&] { bare(mt::ones({1})); }).find("no forward"), std::string::npos);
}

TEST(ModuleTest, NamedModulesAndApply) {
  nn::Sequential seq(nn::Linear(2, 2), nn::Sequential(nn::ReLU(), nn::Linear(2, 1)));
  auto mods = seq.named_modules();
  std::vector<std::string> names;
  for (auto& [n, m] : mods) names.push_back(n + ":" + m->type_name());
  EXPECT_EQ(names, (std::vector<std::string>{":Sequential", "0:Linear", "1:Sequential", "1.0:ReLU", "1.1:Linear"}));
  int count = 0;
  seq.apply([&](nn::Module&) { ++count; });
  EXPECT_EQ(count, 5);
  EXPECT_EQ(names_of(seq.named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "1.1.weight", "1.1.bias"}));
}

TEST(ModuleTest, SharedParametersAreListedOnce) {
  auto lin = std::make_shared<nn::Linear>(2, 2);
  nn::Sequential seq(lin, lin);  // the same module twice: PyTorch lists its parameters once
  EXPECT_EQ(names_of(seq.named_parameters()), (std::vector<std::string>{"0.weight", "0.bias"}));
  EXPECT_EQ(seq.num_parameters(), 6);
  // state_dict keeps both names, as PyTorch does for tied weights.
  EXPECT_EQ(seq.state_dict().size(), 4u);
}

TEST(ModuleTest, TrainEvalPropagates) {
  nn::Sequential seq(nn::Linear(2, 2), nn::Sequential(nn::Dropout(0.5), nn::BatchNorm2d(2)));
  EXPECT_TRUE(seq.is_training());
  seq.eval();
  seq.apply([](nn::Module& m) { EXPECT_FALSE(m.is_training()) << m.type_name(); });
  seq.train();
  seq.apply([](nn::Module& m) { EXPECT_TRUE(m.is_training()) << m.type_name(); });
  seq.train(false);
  EXPECT_FALSE(seq[1]->is_training());
}

TEST(ModuleTest, StateDictOrderAndLayouts) {
  nn::Sequential seq(nn::Conv2d(1, 4, 3, {.padding = 1}), nn::BatchNorm2d(4), nn::Flatten(), nn::Linear(16, 3));
  nn::StateDict sd = seq.state_dict();
  // PyTorch's order: per module its parameters, then its buffers.
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                                 "1.running_var", "1.num_batches_tracked", "3.weight", "3.bias"}));
  EXPECT_EQ(sd.at("0.weight").shape(), (mt::Shape{4, 1, 3, 3}));
  EXPECT_EQ(sd.at("3.weight").shape(), (mt::Shape{3, 16}));
  EXPECT_EQ(sd.at("1.num_batches_tracked").dtype(), mt::kInt64);
  EXPECT_EQ(sd.at("1.num_batches_tracked").dim(), 0);
  EXPECT_EQ(sd.at("1.running_var").dtype(), mt::kFloat32);
  // Entries are detached handles onto the module's storage.
  EXPECT_FALSE(sd.at("0.weight").requires_grad());
  EXPECT_TRUE(sd.at("0.weight").shares_storage(seq.at<nn::Conv2d>(0)->weight()));
}

TEST(ModuleTest, LoadStateDictRoundTripAndDtypeConversion) {
  mt::Generator g1(1), g2(2);
  nn::Linear a(4, 3, {.generator = &g1}), b(4, 3, {.generator = &g2});
  mt::Tensor x = mt::randn({2, 4});
  EXPECT_NE(a(x).to_vector<float>(), b(x).to_vector<float>());
  // Snapshot (clone) a's state, then load into b.
  nn::StateDict snap;
  for (const auto& [k, t] : a.state_dict()) snap.insert(k, t.clone());
  nn::LoadResult r = b.load_state_dict(snap);
  EXPECT_TRUE(r.missing_keys.empty() && r.unexpected_keys.empty());
  EXPECT_EQ(a(x).to_vector<float>(), b(x).to_vector<float>());
  EXPECT_TRUE(b.weight().requires_grad());  // loading keeps the parameter a parameter

  // A bf16 checkpoint loads into an fp32 model (values converted), keeping the model's dtype.
  nn::StateDict half;
  for (const auto& [k, t] : a.state_dict()) half.insert(k, t.to(mt::kBFloat16));
  b.load_state_dict(half);
  EXPECT_EQ(b.weight().dtype(), mt::kFloat32);
  EXPECT_EQ(b.weight().to_vector<float>(), a.weight().to(mt::kBFloat16).to_vector<float>());

  // Any map-like container converts (e.g. io::load_safetensors(...).tensors).
  std::map<std::string, mt::Tensor> as_map(snap.begin(), snap.end());
  b.load_state_dict(as_map);
  EXPECT_EQ(b.weight().to_vector<float>(), a.weight().to_vector<float>());
}

TEST(ModuleTest, LoadStateDictErrorsNameTheKeys) {
  nn::Sequential model(nn::Conv2d(1, 32, 3, {.padding = 1}), nn::ReLU(), nn::Linear(8, 2));
  const std::vector<float> before = model.at<nn::Linear>(2)->weight().to_vector<float>();

  nn::StateDict missing = model.state_dict();
  missing.erase("2.bias");
  std::string msg = error_message([&] { model.load_state_dict(missing); });
  EXPECT_NE(msg.find("missing keys: \"2.bias\""), std::string::npos) << msg;

  nn::StateDict unexpected = model.state_dict();
  unexpected.insert("5.weight", mt::zeros({1}));
  msg = error_message([&] { model.load_state_dict(unexpected); });
  EXPECT_NE(msg.find("unexpected keys: \"5.weight\""), std::string::npos) << msg;

  nn::StateDict wrong_shape = model.state_dict();
  wrong_shape.insert("0.weight", mt::zeros({16, 1, 3, 3}));
  wrong_shape.insert("2.weight", mt::zeros({2, 8}));  // valid: must not be copied since another entry fails
  msg = error_message([&] { model.load_state_dict(wrong_shape); });
  EXPECT_NE(msg.find("\"0.weight\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("[16, 1, 3, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[32, 1, 3, 3]"), std::string::npos) << msg;
  EXPECT_EQ(model.at<nn::Linear>(2)->weight().to_vector<float>(), before);  // nothing was loaded

  nn::StateDict wrong_kind = model.state_dict();
  wrong_kind.insert("2.bias", mt::zeros({2}, {.dtype = mt::kInt64}));
  msg = error_message([&] { model.load_state_dict(wrong_kind); });
  EXPECT_NE(msg.find("dtype mismatch for \"2.bias\""), std::string::npos) << msg;

  // Non-strict: missing/unexpected keys are reported, the rest is loaded; shape errors still throw.
  nn::StateDict partial;
  partial.insert("2.weight", mt::ones({2, 8}));
  partial.insert("extra", mt::ones({1}));
  nn::LoadResult r = model.load_state_dict(partial, /*strict=*/false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"0.weight", "0.bias", "2.bias"}));
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"extra"}));
  EXPECT_EQ(model.at<nn::Linear>(2)->weight().to_vector<float>(), std::vector<float>(16, 1.0f));
  partial.insert("2.weight", mt::ones({3, 8}));
  EXPECT_THROW(model.load_state_dict(partial, false), mt::Error);
}

TEST(ModuleTest, ToConvertsInPlaceKeepingHandlesAndRequiresGrad) {
  nn::Linear lin(3, 2);
  mt::Tensor w_handle = lin.weight();
  std::vector<mt::Tensor> params = lin.parameters();
  std::vector<float> w32 = lin.weight().to_vector<float>();
  mt::Tensor out = lin(mt::ones({1, 3}));
  out.backward(mt::ones_like(out));
  ASSERT_TRUE(lin.weight().grad().defined());

  lin.to(mt::kBFloat16);
  EXPECT_EQ(lin.weight().dtype(), mt::kBFloat16);
  EXPECT_EQ(w_handle.dtype(), mt::kBFloat16);  // the same TensorImpl, converted
  EXPECT_EQ(params[1].dtype(), mt::kBFloat16);
  EXPECT_TRUE(lin.weight().requires_grad());
  EXPECT_TRUE(lin.weight().is_leaf());
  EXPECT_EQ(lin.weight().grad().dtype(), mt::kBFloat16);
  EXPECT_EQ(lin.weight().to_vector<float>(), mt::from_vector(w32, {2, 3}).to(mt::kBFloat16).to_vector<float>());
  EXPECT_THROW(lin.to(mt::kInt32), mt::Error);
  lin.to(mt::kFloat32);
  EXPECT_EQ(w_handle.dtype(), mt::kFloat32);
}

TEST(ModuleTest, ZeroGradAndNumParameters) {
  nn::Linear lin(3, 2);
  mt::Tensor out = lin(mt::ones({4, 3}));
  out.backward(mt::ones_like(out));
  ASSERT_TRUE(lin.bias().grad().defined());
  EXPECT_EQ(lin.bias().grad().to_vector<float>(), (std::vector<float>{4, 4}));
  lin.zero_grad(/*set_to_none=*/false);
  EXPECT_EQ(lin.bias().grad().to_vector<float>(), (std::vector<float>{0, 0}));
  lin.zero_grad();
  EXPECT_FALSE(lin.bias().grad().defined());
  EXPECT_EQ(lin.num_parameters(), 8);
  mt::Tensor w = lin.weight();
  w.requires_grad_(false);
  EXPECT_EQ(lin.num_parameters(/*trainable_only=*/true), 2);
}

TEST(ModuleTest, SequentialConstructionIndexingAndCopy) {
  // The documented module form compiles: values by value, options by designated initializers.
  nn::Sequential model(nn::Conv2d(1, 32, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten());
  EXPECT_EQ(model.size(), 4u);
  EXPECT_EQ(model[0]->type_name(), "Conv2d");
  EXPECT_EQ(model.at<nn::Conv2d>(0)->weight().shape(), (mt::Shape{32, 1, 3, 3}));
  EXPECT_THROW(model[4], mt::Error);
  EXPECT_NE(error_message([&] { model.at<nn::Linear>(1); }).find("ReLU"), std::string::npos);
  model.push_back(std::make_shared<nn::Linear>(32 * 14 * 14, 10));
  model.push_back(nn::ReLU());
  EXPECT_EQ(model.named_children()[5].first, "5");
  EXPECT_EQ(model(mt::zeros({2, 1, 28, 28})).shape(), (mt::Shape{2, 10}));

  // Copies are shallow (share parameters); a one-argument Sequential copies rather than nests.
  nn::Sequential copy(model);
  EXPECT_EQ(copy.size(), model.size());
  EXPECT_TRUE(copy.at<nn::Conv2d>(0)->weight().is_same(model.at<nn::Conv2d>(0)->weight()));
  nn::Sequential nested{nn::Sequential(nn::ReLU()), nn::ReLU()};
  EXPECT_EQ(nested[0]->type_name(), "Sequential");

  std::string repr = model.repr();
  EXPECT_NE(repr.find("(0): Conv2d(1, 32, kernel_size=3, stride=1, padding=1)"), std::string::npos) << repr;
  EXPECT_NE(repr.find("(4): Linear(in_features=6272, out_features=10, bias=true)"), std::string::npos) << repr;
}

TEST(ModuleTest, StateDictContainer) {
  nn::StateDict sd{{"b", mt::ones({1})}, {"a", mt::zeros({2})}};
  sd.insert("b", mt::zeros({3}));  // replaces, keeping the position
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(sd.at("b").numel(), 3);
  EXPECT_TRUE(sd.erase("b"));
  EXPECT_FALSE(sd.erase("b"));
  EXPECT_EQ(sd.find("b"), nullptr);
  EXPECT_NE(error_message([&] { sd.at("zz"); }).find("\"zz\" (keys: \"a\")"), std::string::npos);
}

TEST(ModuleTest, InitFormulas) {
  namespace init = nn::init;
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::kReLU), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::kLeakyReLU, std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::kTanh), 5.0 / 3.0);
  auto [fi, fo] = init::calculate_fan_in_and_fan_out(mt::empty({64, 32, 3, 3}));
  EXPECT_EQ(fi, 32 * 9);
  EXPECT_EQ(fo, 64 * 9);
  EXPECT_THROW(init::calculate_fan_in_and_fan_out(mt::empty({5})), mt::Error);

  mt::Generator g(3);
  mt::Tensor w = mt::empty({400, 300}, {.requires_grad = true});  // works on a parameter (no-grad inside)
  init::kaiming_uniform_(w, std::sqrt(5.0), init::FanMode::kFanIn, init::Nonlinearity::kLeakyReLU, &g);
  std::vector<float> v = w.to_vector<float>();
  double bound = 1.0 / std::sqrt(300.0), sq = 0;
  for (float x : v) {
    ASSERT_LE(std::abs(x), bound);
    sq += double(x) * x;
  }
  EXPECT_NEAR(std::sqrt(sq / v.size()), bound / std::sqrt(3.0), 0.01 * bound);
  init::xavier_uniform_(w, 1.0, &g);
  for (float x : w.to_vector<float>()) ASSERT_LE(std::abs(x), std::sqrt(6.0 / 700.0));
  init::ones_(w);
  EXPECT_EQ(w.to_vector<float>()[123], 1.0f);
  init::normal_(w, 2.0, 0.5, &g);
  double mean = 0;
  for (float x : w.to_vector<float>()) mean += x;
  EXPECT_NEAR(mean / w.numel(), 2.0, 0.01);
}
