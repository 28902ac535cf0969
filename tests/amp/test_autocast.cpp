// Autocast: every op in the policy table produces its policy's dtype and the same bits as the op run
// outside autocast on manually cast inputs (PyTorch's test_autocast method); promote, nesting,
// disabled regions, gradients of fp32 leaves, the cast cache and explain mode.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/mixtrain.h"
#include "support/checked_device.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
using mt::amp::Autocast;
using mt::amp::CastPolicy;

namespace {

struct OpCase {
  const char* name;
  mt::OpId op;
  std::function<mt::Tensor(const std::vector<mt::Tensor>&)> fn;
  std::vector<mt::Tensor> inputs;  // float inputs are cast per the test; others pass through
};

mt::Tensor rnd(const mt::Shape& s, uint64_t seed, double lo = -1, double hi = 1) {
  mt::Generator g(seed);
  mt::Tensor t = mt::rand(s, {}, &g);
  return mt::add(mt::mul(t, hi - lo), lo);
}

std::vector<OpCase> cases() {
  mt::Tensor a = rnd({8, 8}, 1), b = rnd({8, 8}, 2), pos = rnd({8, 8}, 3, 0.1, 2.0);
  mt::Tensor x4 = rnd({2, 3, 8, 8}, 4), w4 = rnd({4, 3, 3, 3}, 5), bias4 = rnd({4}, 6);
  mt::Tensor target = mt::randint(0, 8, {8});
  mt::Tensor probs = rnd({8, 8}, 7, 0.05, 0.95), labels = mt::gt(rnd({8, 8}, 8), 0.0).to(mt::kFloat32);
  mt::Tensor q = rnd({2, 2, 4, 8}, 9), k = rnd({2, 2, 4, 8}, 10), v = rnd({2, 2, 4, 8}, 11);
  mt::Tensor w = rnd({8}, 12), wb = rnd({8}, 13), b3 = rnd({2, 8, 8}, 14), c3 = rnd({2, 8, 8}, 15);
  using V = const std::vector<mt::Tensor>&;
  return {
      {"matmul", mt::OpId::kMatmul, [](V in) { return mt::matmul(in[0], in[1]); }, {a, b}},
      {"bmm", mt::OpId::kBmm, [](V in) { return mt::bmm(in[0], in[1]); }, {b3, c3}},
      {"linear", mt::OpId::kLinear, [](V in) { return mt::linear(in[0], in[1], in[2]); }, {a, b, w}},
      {"conv2d", mt::OpId::kConv2d, [](V in) { return F::conv2d(in[0], in[1], in[2], {.padding_h = 1, .padding_w = 1}); },
       {x4, w4, bias4}},
      {"sdpa", mt::OpId::kScaledDotProductAttention,
       [](V in) { return F::scaled_dot_product_attention(in[0], in[1], in[2], true); }, {q, k, v}},
      {"exp", mt::OpId::kExp, [](V in) { return mt::exp(in[0]); }, {a}},
      {"log", mt::OpId::kLog, [](V in) { return mt::log(in[0]); }, {pos}},
      {"pow", mt::OpId::kPow, [](V in) { return mt::pow(in[0], 1.5); }, {pos}},
      {"rsqrt", mt::OpId::kRsqrt, [](V in) { return mt::rsqrt(in[0]); }, {pos}},
      {"sum", mt::OpId::kSum, [](V in) { return mt::sum(in[0], {1}); }, {a}},
      {"mean", mt::OpId::kMean, [](V in) { return mt::mean(in[0]); }, {a}},
      {"softmax", mt::OpId::kSoftmax, [](V in) { return F::softmax(in[0], 0); }, {a}},
      {"log_softmax", mt::OpId::kLogSoftmax, [](V in) { return F::log_softmax(in[0], 1); }, {a}},
      {"layer_norm", mt::OpId::kLayerNorm, [](V in) { return F::layer_norm(in[0], {8}, in[1], in[2]); }, {a, w, wb}},
      {"cross_entropy", mt::OpId::kCrossEntropy, [](V in) { return F::cross_entropy(in[0], in[1]); }, {a, target}},
      {"nll_loss", mt::OpId::kNllLoss, [](V in) { return F::nll_loss(in[0], in[1]); }, {a, target}},
      {"mse_loss", mt::OpId::kMseLoss, [](V in) { return F::mse_loss(in[0], in[1]); }, {a, b}},
      {"bce_with_logits", mt::OpId::kBinaryCrossEntropyWithLogits,
       [](V in) { return F::binary_cross_entropy_with_logits(in[0], in[1]); }, {a, labels}},
      {"add", mt::OpId::kAdd, [](V in) { return mt::add(in[0], in[1]); }, {a, b}},
      {"mul", mt::OpId::kMul, [](V in) { return mt::mul(in[0], in[1]); }, {a, b}},
      {"relu", mt::OpId::kRelu, [](V in) { return mt::relu(in[0]); }, {a}},
      {"gelu", mt::OpId::kGelu, [](V in) { return mt::gelu(in[0]); }, {a}},
      {"max_pool2d", mt::OpId::kMaxPool2d, [](V in) { return F::max_pool2d(in[0], {.kernel_h = 2, .kernel_w = 2}); }, {x4}},
  };
}

// What the op's inputs must be cast to for a region of `region` dtype, given the inputs' dtype.
mt::DType expected_dtype(mt::OpId op, mt::DType region, mt::DType inputs) {
  switch (mt::amp::Policy::default_rule(mt::amp::policy_id(op)).policy) {
    case CastPolicy::kLowerPrecision: return region;
    case CastPolicy::kFp32: return mt::kFloat32;
    case CastPolicy::kPromote:
    case CastPolicy::kInputDtype: return inputs;
  }
  return inputs;
}

std::vector<mt::Tensor> cast_floats(const std::vector<mt::Tensor>& in, mt::DType d) {
  std::vector<mt::Tensor> out;
  for (const auto& t : in) out.push_back(t.is_floating_point() ? t.to(d) : t);
  return out;
}

void expect_bitwise_equal(const mt::Tensor& a, const mt::Tensor& b, const char* what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  mt::Tensor x = a.to(mt::Device{}).contiguous(), y = b.to(mt::Device{}).contiguous();
  EXPECT_EQ(0, std::memcmp(x.raw_data(), y.raw_data(), x.nbytes())) << what;
}

}  // namespace

class AutocastPolicyTest : public ::testing::TestWithParam<std::tuple<mt::DType, mt::DType>> {};

// For each region dtype and each input dtype (fp32 inputs, and 16-bit inputs of the region's dtype),
// every op's output has the policy's dtype and equals the op on manually cast inputs, bit for bit.
TEST_P(AutocastPolicyTest, EveryOpMatchesManualCast) {
  auto [region, input_dtype] = GetParam();
  for (const OpCase& c : cases()) {
    std::vector<mt::Tensor> inputs = cast_floats(c.inputs, input_dtype);
    mt::DType expect = expected_dtype(c.op, region, input_dtype);
    mt::Tensor got;
    {
      Autocast ac(mt::testing::test_device().type, region);
      got = c.fn(inputs);
    }
    mt::Tensor manual = c.fn(cast_floats(inputs, expect));
    if (c.op == mt::OpId::kMaxPool2d || c.op == mt::OpId::kRelu || c.op == mt::OpId::kGelu) {
      EXPECT_EQ(got.dtype(), input_dtype) << c.name << " is unlisted: runs in its input dtype";
    } else {
      EXPECT_EQ(got.dtype(), expect) << c.name;
    }
    expect_bitwise_equal(got, manual, c.name);
  }
}

INSTANTIATE_TEST_SUITE_P(Regions, AutocastPolicyTest,
                         ::testing::Values(std::make_tuple(mt::kBFloat16, mt::kFloat32),
                                           std::make_tuple(mt::kFloat16, mt::kFloat32),
                                           std::make_tuple(mt::kBFloat16, mt::kBFloat16),
                                           std::make_tuple(mt::kFloat16, mt::kFloat16)));

TEST(Autocast, PromoteWidestInput) {
  mt::Tensor a = rnd({4}, 1), b = rnd({4}, 2).to(mt::kBFloat16);
  Autocast ac(mt::testing::test_device().type, mt::kBFloat16);
  EXPECT_EQ(mt::add(a, b).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::mul(b, b).dtype(), mt::kBFloat16);
  EXPECT_EQ(mt::cat({b, a}).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::stack({b, b}).dtype(), mt::kBFloat16);
  // fp16 input inside a bf16 region with no fp32 input to promote to: refused like PyTorch.
  EXPECT_THROW(mt::add(b, rnd({4}, 3).to(mt::kFloat16)), mt::Error);
}

TEST(Autocast, Fp64AndIntegersAreNotCast) {
  mt::Tensor d = rnd({4, 4}, 1).to(mt::kFloat64);
  Autocast ac(mt::testing::test_device().type, mt::kBFloat16);
  EXPECT_EQ(mt::matmul(d, d).dtype(), mt::kFloat64);
  EXPECT_EQ(mt::sum(d).dtype(), mt::kFloat64);
  mt::Tensor idx = mt::arange(4);
  EXPECT_EQ(mt::index_select(rnd({4, 2}, 2), 0, idx).dtype(), mt::kFloat32);  // unlisted: input dtype
}

TEST(Autocast, NestingAndDisabledRegions) {
  mt::Tensor a = rnd({8, 8}, 1);
  EXPECT_FALSE(mt::amp::is_autocast_enabled());
  {
    Autocast outer(mt::testing::test_device().type, mt::kBFloat16);
    EXPECT_EQ(mt::matmul(a, a).dtype(), mt::kBFloat16);
    {
      Autocast inner(mt::testing::test_device().type, mt::kFloat16);
      EXPECT_EQ(mt::amp::get_autocast_dtype(mt::testing::test_device().type), mt::kFloat16);
      EXPECT_EQ(mt::matmul(a, a).dtype(), mt::kFloat16);
      {
        Autocast off(mt::testing::test_device().type, std::nullopt, /*enabled=*/false);
        EXPECT_FALSE(mt::amp::is_autocast_enabled());
        EXPECT_EQ(mt::matmul(a, a).dtype(), mt::kFloat32);
      }
      EXPECT_TRUE(mt::amp::is_autocast_enabled());
    }
    EXPECT_EQ(mt::amp::get_autocast_dtype(mt::testing::test_device().type), mt::kBFloat16);
  }
  EXPECT_FALSE(mt::amp::is_autocast_enabled());
  EXPECT_EQ(mt::matmul(a, a).dtype(), mt::kFloat32);
}

TEST(Autocast, DefaultsAndValidation) {
  EXPECT_EQ(mt::amp::default_autocast_dtype(mt::kCPU), mt::kBFloat16);
  EXPECT_EQ(mt::amp::default_autocast_dtype(mt::kCUDA), mt::kFloat16);
  {
    Autocast ac;  // CPU, bf16
    EXPECT_EQ(mt::amp::get_autocast_dtype(mt::testing::test_device().type), mt::kBFloat16);
  }
  EXPECT_THROW(Autocast(mt::kCPU, mt::kFloat32), mt::Error);
  if (mt::device_count(mt::kCUDA) == 0)  // no CUDA backend in this build, or no GPU
    EXPECT_THROW(Autocast(mt::kCUDA, mt::kFloat16), mt::Error);
  EXPECT_FALSE(mt::amp::is_autocast_enabled());  // a failed constructor leaves the state alone
}

TEST(Autocast, Fp32LeavesGetFp32Gradients) {
  mt::Tensor w = rnd({8, 8}, 1).requires_grad_(), bias = rnd({8}, 2).requires_grad_();
  mt::Tensor x = rnd({4, 8}, 3);
  mt::Tensor loss;
  {
    Autocast ac(mt::testing::test_device().type, mt::kBFloat16);
    mt::Tensor h = mt::linear(x, w, bias);
    EXPECT_EQ(h.dtype(), mt::kBFloat16);
    loss = mt::sum(mt::relu(h));
    EXPECT_EQ(loss.dtype(), mt::kFloat32);
  }
  loss.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), mt::kFloat32);
  EXPECT_EQ(bias.grad().dtype(), mt::kFloat32);
}

TEST(Autocast, BinaryCrossEntropyRefusedUnderFp16) {
  mt::Tensor p = rnd({4}, 1, 0.1, 0.9), y = rnd({4}, 2, 0.0, 1.0);
  {
    Autocast ac(mt::testing::test_device().type, mt::kFloat16);
    try {
      F::binary_cross_entropy(p, y);
      FAIL() << "expected mt::Error";
    } catch (const mt::Error& e) {
      EXPECT_NE(std::string(e.what()).find("binary_cross_entropy_with_logits"), std::string::npos) << e.what();
    }
    EXPECT_EQ(F::binary_cross_entropy_with_logits(p, y).dtype(), mt::kFloat32);
  }
  Autocast ac(mt::testing::test_device().type, mt::kBFloat16);
  EXPECT_EQ(F::binary_cross_entropy(p.to(mt::kBFloat16), y).dtype(), mt::kFloat32);
}

TEST(AutocastCache, WeightsAreCastOncePerRegion) {
  mt::Tensor w = rnd({8, 8}, 1).requires_grad_();
  mt::Tensor x = rnd({4, 8}, 2);
  mt::amp::reset_cast_cache_stats();
  {
    Autocast ac(mt::testing::test_device().type, mt::kBFloat16);
    for (int i = 0; i < 5; ++i) mt::linear(x, w);
    auto s = mt::amp::cast_cache_stats();
    EXPECT_EQ(s.misses, 1);
    EXPECT_EQ(s.hits, 4);
    EXPECT_EQ(s.entries, 1);
    {
      Autocast nested(mt::testing::test_device().type, mt::kBFloat16);
      mt::linear(x, w);
    }
    EXPECT_EQ(mt::amp::cast_cache_stats().entries, 1) << "only the outermost region clears the cache";
  }
  EXPECT_EQ(mt::amp::cast_cache_stats().entries, 0);
  // Activations (not leaves) and tensors that do not require grad are never cached.
  mt::amp::reset_cast_cache_stats();
  {
    Autocast ac(mt::testing::test_device().type, mt::kBFloat16);
    mt::Tensor plain = rnd({8, 8}, 3);
    mt::linear(x, plain);
    mt::linear(x, plain);
    EXPECT_EQ(mt::amp::cast_cache_stats().entries, 0);
  }
}

TEST(AutocastCache, NothingCachedUnderNoGrad) {
  // PyTorch issues #65766 / #112583: a cast cached under no_grad has no graph; reusing it in a
  // training forward silently drops the weight's gradient.
  mt::Tensor w = rnd({8, 8}, 1).requires_grad_();
  mt::Tensor x = rnd({4, 8}, 2);
  Autocast ac(mt::testing::test_device().type, mt::kBFloat16);
  {
    mt::NoGradGuard no_grad;
    mt::linear(x, w);
    EXPECT_EQ(mt::amp::cast_cache_stats().entries, 0);
  }
  mt::Tensor loss = mt::sum(mt::linear(x, w));
  loss.backward();
  EXPECT_TRUE(w.grad().defined());
}

TEST(AutocastCache, InPlaceUpdateInvalidatesEntry) {
  mt::Tensor w = rnd({8, 8}, 1).requires_grad_();
  mt::Tensor x = rnd({4, 8}, 2);
  Autocast ac(mt::testing::test_device().type, mt::kBFloat16);
  mt::Tensor before = mt::linear(x, w);
  {
    mt::NoGradGuard no_grad;
    w.mul_(2.0);  // an optimizer step inside a long region
  }
  mt::Tensor after = mt::linear(x, w);
  mt::Tensor expected = mt::mul(before.to(mt::kFloat32), 2.0);
  EXPECT_EQ(after.to(mt::kFloat32).to_vector<float>(), expected.to(mt::kBFloat16).to(mt::kFloat32).to_vector<float>());
}

TEST(AutocastCache, MemoryDoesNotGrowOverRepeatedForwards) {
  mt::Tensor w = rnd({64, 64}, 1).requires_grad_();
  mt::Tensor x = rnd({16, 64}, 2);
  auto run = [&] {
    Autocast ac(mt::testing::test_device().type, mt::kBFloat16);
    mt::NoGradGuard no_grad;
    mt::linear(x, w);
  };
  run();
  int64_t base = mt::memory::stats(mixtrain::testing::test_device()).current_bytes;
  for (int i = 0; i < 20; ++i) run();
  EXPECT_EQ(mt::memory::stats(mixtrain::testing::test_device()).current_bytes, base);
  for (int i = 0; i < 20; ++i) {
    Autocast ac(mt::testing::test_device().type, mt::kBFloat16);
    mt::Tensor y = mt::linear(x, w);
  }
  EXPECT_EQ(mt::memory::stats(mixtrain::testing::test_device()).current_bytes, base);
}

TEST(AutocastPolicy, OverridesAndRegisteredOps) {
  mt::Tensor a = rnd({8, 8}, 1);
  EXPECT_EQ(mt::amp::Policy::get(mt::OpId::kMatmul).policy, CastPolicy::kLowerPrecision);
  mt::amp::Policy::set(mt::OpId::kMatmul, CastPolicy::kFp32);
  {
    Autocast ac(mt::testing::test_device().type, mt::kBFloat16);
    EXPECT_EQ(mt::matmul(a, a).dtype(), mt::kFloat32);
  }
  mt::amp::Policy::reset();
  {
    mt::amp::AutocastOptions o;
    o.device_type = mixtrain::testing::test_device().type;
    o.dtype = mt::kBFloat16;
    o.overrides = {{mt::amp::policy_id(mt::OpId::kSoftmax), CastPolicy::kLowerPrecision}};
    Autocast ac(o);
    EXPECT_EQ(F::softmax(a, 1).dtype(), mt::kBFloat16);
    EXPECT_EQ(mt::matmul(a, a).dtype(), mt::kBFloat16);
  }
  {
    Autocast ac(mt::testing::test_device().type, mt::kBFloat16);
    EXPECT_EQ(F::softmax(a, 1).dtype(), mt::kFloat32) << "region override ended with its region";
  }
  mt::amp::PolicyId my_op = mt::amp::Policy::register_op("my_fused_op", CastPolicy::kLowerPrecision);
  EXPECT_EQ(mt::amp::Policy::register_op("my_fused_op", CastPolicy::kFp32), my_op);
  EXPECT_EQ(mt::amp::Policy::name(my_op), "my_fused_op");
  mt::Tensor in = a;
  EXPECT_EQ(mt::amp::autocast_inputs(my_op, {&in}), mt::kFloat32) << "outside a region nothing changes";
  {
    Autocast ac(mt::testing::test_device().type, mt::kFloat16);
    EXPECT_EQ(mt::amp::autocast_inputs(my_op, {&in}), mt::kFloat16);
    EXPECT_EQ(in.dtype(), mt::kFloat16);
  }
  EXPECT_THROW(mt::amp::Policy::get(mt::amp::Policy::size() + 5), mt::Error);
}

TEST(AutocastPolicy, ExplainRecordsEachDecision) {
  mt::Tensor w = rnd({8, 8}, 1), x = rnd({4, 8}, 2);
  mt::Tensor target = mt::randint(0, 8, {4});
  mt::amp::ExplainGuard explain;
  {
    Autocast ac(mt::testing::test_device().type, mt::kBFloat16);
    F::cross_entropy(mt::relu(mt::linear(x, w)), target);
  }
  const auto& r = explain.records();
  ASSERT_GE(r.size(), 3u);
  EXPECT_EQ(r[0].op, "linear");
  EXPECT_EQ(r[0].chosen, mt::kBFloat16);
  EXPECT_EQ(r[0].policy, CastPolicy::kLowerPrecision);
  EXPECT_EQ(r[1].op, "relu");
  EXPECT_EQ(r[1].chosen, mt::kBFloat16);
  EXPECT_EQ(r[2].op, "cross_entropy");
  EXPECT_EQ(r[2].chosen, mt::kFloat32);
  EXPECT_EQ(r[2].source, "default");
  std::string report = explain.report();
  EXPECT_NE(report.find("linear"), std::string::npos);
  EXPECT_NE(report.find("lower_precision"), std::string::npos);
}

// backward() called inside a region (discouraged, but legal) must not autocast the backward pass:
// the engine suspends autocast, so no backward op (here the sum of the two gradients reaching `h`)
// shows up in explain mode and the gradients equal those of a backward outside the region.
TEST(Autocast, BackwardInsideARegionIsNotAutocast) {
  mt::Tensor w = rnd({8, 8}, 1).requires_grad_();
  mt::Tensor x = rnd({4, 8}, 2);
  auto run = [&](bool backward_inside, size_t* backward_records) {
    w.set_grad(mt::Tensor());
    mt::amp::ExplainGuard explain;
    mt::Tensor loss;
    {
      Autocast ac(mt::testing::test_device().type, mt::kBFloat16);
      mt::Tensor h = mt::linear(x, w);
      loss = mt::sum(mt::mul(h, h));  // h is used twice: its two gradients are summed in backward
      const size_t forward_records = explain.records().size();
      if (backward_inside) loss.backward();
      *backward_records = explain.records().size() - forward_records;
    }
    if (!backward_inside) loss.backward();
    return w.grad().to_vector<float>();
  };
  size_t inside_records = 0, outside_records = 0;
  std::vector<float> inside = run(true, &inside_records), outside = run(false, &outside_records);
  EXPECT_EQ(inside_records, 0u);
  EXPECT_EQ(inside, outside);
}

// One policy table per device type: the CUDA table is PyTorch's CUDA lists, which differ from the
// CPU table in two ops; overrides can name one device type.
TEST(AutocastPolicy, EachDeviceTypeHasItsOwnTable) {
  using mt::amp::Policy;
  int differing = 0;
  for (int i = 0; i < mt::kNumOps; ++i) {
    const auto op = static_cast<mt::OpId>(i);
    const mt::amp::Rule cpu = Policy::default_rule(mt::amp::policy_id(op), mt::kCPU);
    const mt::amp::Rule cuda = Policy::default_rule(mt::amp::policy_id(op), mt::kCUDA);
    const mt::amp::Rule other = Policy::default_rule(mt::amp::policy_id(op), mt::kPrivateUse1);
    EXPECT_EQ(other.policy, cpu.policy) << mt::to_string(op) << ": an out-of-tree device starts from the CPU table";
    differing += cuda.policy != cpu.policy || cuda.refuse_always != cpu.refuse_always;
  }
  EXPECT_EQ(differing, 2);
  EXPECT_EQ(Policy::default_rule(mt::amp::policy_id(mt::OpId::kMean), mt::kCUDA).policy, CastPolicy::kInputDtype);
  EXPECT_EQ(Policy::default_rule(mt::amp::policy_id(mt::OpId::kMean), mt::kCPU).policy, CastPolicy::kFp32);
  EXPECT_TRUE(Policy::default_rule(mt::amp::policy_id(mt::OpId::kBinaryCrossEntropy), mt::kCUDA).refuse_always);
  EXPECT_FALSE(Policy::default_rule(mt::amp::policy_id(mt::OpId::kBinaryCrossEntropy), mt::kCPU).refuse_always);

  // An override for one device type leaves the others alone; one without a device type sets all.
  Policy::set(mt::OpId::kSoftmax, CastPolicy::kLowerPrecision, mt::kCUDA);
  EXPECT_EQ(Policy::get(mt::OpId::kSoftmax, mt::kCUDA).policy, CastPolicy::kLowerPrecision);
  EXPECT_EQ(Policy::get(mt::OpId::kSoftmax, mt::kCPU).policy, CastPolicy::kFp32);
  {
    Autocast ac(mixtrain::testing::test_device().type, mt::kBFloat16);
    EXPECT_EQ(F::softmax(mt::randn({2, 3}), 1).dtype(), mt::kFloat32) << "the CUDA override does not reach this device";
  }
  Policy::set(mt::OpId::kSoftmax, CastPolicy::kLowerPrecision);
  EXPECT_EQ(Policy::get(mt::OpId::kSoftmax, mt::kCPU).policy, CastPolicy::kLowerPrecision);
  Policy::reset();
  EXPECT_EQ(Policy::get(mt::OpId::kSoftmax, mt::kCUDA).policy, CastPolicy::kFp32);
}
