// Activation checkpointing (nn/checkpoint.h): gradients bit for bit those of the plain run (GPT
// blocks under fp32 and bf16/fp16 autocast, a Sequential with Dropout, a first segment whose input
// needs no grad), the memory it saves, and its refusals.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/memory.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/nn/modules.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
namespace nn = mixtrain::nn;
namespace F = mixtrain::nn::functional;

namespace {

using Grads = std::map<std::string, mt::Tensor>;

bool same_bits(const mt::Tensor& a, const mt::Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  // Host copies: the tests also run on the checked device, whose memory the host may not read.
  const mt::Tensor ca = a.to(mt::Device(mt::kCPU)).contiguous(), cb = b.to(mt::Device(mt::kCPU)).contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0;
}

// One forward + backward of `model` on (x, y); returns the loss and every parameter's gradient
// (cloned), and leaves the gradients cleared for the next run.
template <typename Loss>
std::pair<mt::Tensor, Grads> step(nn::Module& model, const mt::Tensor& x, Loss loss_fn, std::optional<mt::DType> amp) {
  mt::Tensor loss;
  {
    mt::amp::Autocast autocast(mt::kCPU, amp.value_or(mt::kBFloat16), amp.has_value());
    loss = loss_fn(model.forward(x));
  }
  loss.backward();
  Grads grads;
  for (auto& [name, p] : model.named_parameters()) {
    EXPECT_TRUE(p.grad().defined()) << name << " received no gradient";
    if (p.grad().defined()) grads[name] = p.grad().clone();
  }
  model.zero_grad();
  return {loss.detach(), grads};
}

void expect_same(const std::pair<mt::Tensor, Grads>& plain, const std::pair<mt::Tensor, Grads>& ckpt) {
  EXPECT_TRUE(same_bits(plain.first, ckpt.first)) << "loss " << plain.first.item<float>() << " vs "
                                                  << ckpt.first.item<float>();
  ASSERT_EQ(plain.second.size(), ckpt.second.size());
  for (const auto& [name, g] : plain.second) {
    ASSERT_TRUE(ckpt.second.count(name)) << name;
    EXPECT_TRUE(same_bits(g, ckpt.second.at(name))) << name << " differs";
    // A gradient of zeros everywhere would make the comparison empty of meaning.
    const mt::Tensor g64 = g.to(mt::kFloat64);
    EXPECT_GT(mt::sum(mt::mul(g64, g64)).item<double>(), 0.0) << name;
  }
}

nn::GPTConfig tiny_gpt() {
  return {.vocab_size = 32, .context = 16, .embed_dim = 32, .num_layers = 3, .num_heads = 4, .mlp_ratio = 4};
}

mt::Tensor tokens(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  mt::Generator g(seed);
  return mt::randint(0, vocab, {b, t}, {.dtype = mt::kInt64}, &g);
}

class ActivationCheckpointGPT : public ::testing::TestWithParam<std::optional<mt::DType>> {};

TEST_P(ActivationCheckpointGPT, GradientsAreBitIdenticalToThePlainRun) {
  mt::Generator init(3);
  nn::GPT gpt(tiny_gpt(), &init);
  const mt::Tensor x = tokens(2, 16, 32, 1), y = tokens(2, 16, 32, 2);
  auto loss = [&](const mt::Tensor& logits) { return F::cross_entropy(logits.reshape({-1, 32}), y.reshape({-1})); };
  const auto plain = step(gpt, x, loss, GetParam());
  gpt.set_checkpoint_activations(true);
  ASSERT_TRUE(gpt.checkpoint_activations());
  const auto ckpt = step(gpt, x, loss, GetParam());
  expect_same(plain, ckpt);
  // And back: switching it off restores the plain run.
  gpt.set_checkpoint_activations(false);
  expect_same(plain, step(gpt, x, loss, GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Precisions, ActivationCheckpointGPT,
                         ::testing::Values(std::nullopt, std::optional<mt::DType>(mt::kBFloat16),
                                           std::optional<mt::DType>(mt::kFloat16)),
                         [](const auto& info) {
                           return info.param ? std::string(info.param == mt::kBFloat16 ? "bf16" : "fp16")
                                             : std::string("fp32");
                         });

nn::Sequential mlp_with_dropout(uint64_t seed) {
  mt::Generator g(seed);
  nn::Sequential m;
  m.push_back(nn::Linear(12, 24, {.generator = &g}));
  m.push_back(nn::GELU());
  m.push_back(nn::Dropout(0.5, {.seed = 11}));
  m.push_back(nn::Linear(24, 24, {.generator = &g}));
  m.push_back(nn::ReLU());
  m.push_back(nn::Dropout(0.25, {.seed = 12}));
  m.push_back(nn::Linear(24, 5, {.generator = &g}));
  return m;
}

TEST(ActivationCheckpoint, SequentialWithDropoutDrawsTheSameMasks) {
  for (auto amp : {std::optional<mt::DType>{}, std::optional<mt::DType>(mt::kBFloat16)}) {
    nn::Sequential plain_model = mlp_with_dropout(5), ckpt_model = mlp_with_dropout(5);
    mt::Generator g(9);
    // The input requires grad here; the first segment's input often does not (next test).
    mt::Tensor x = mt::randn({8, 12}, {}, &g);
  x.requires_grad_(true);
    const mt::Tensor target = mt::randint(0, 5, {8}, {.dtype = mt::kInt64}, &g);
    auto loss = [&](const mt::Tensor& out) { return F::cross_entropy(out, target); };
    ckpt_model.set_checkpoint_segments(3);
    for (int it = 0; it < 2; ++it) {  // two steps: the generators move on identically
      const auto a = step(plain_model, x, loss, amp);
      const mt::Tensor gx_plain = x.grad().clone();
      x.set_grad(mt::Tensor());
      const auto b = step(ckpt_model, x, loss, amp);
      expect_same(a, b);
      EXPECT_TRUE(same_bits(gx_plain, x.grad())) << "input gradient";
      x.set_grad(mt::Tensor());
    }
    for (size_t i : {2u, 5u})
      EXPECT_EQ(plain_model.at<nn::Dropout>(i)->generator().state(), ckpt_model.at<nn::Dropout>(i)->generator().state());
  }
}

TEST(ActivationCheckpoint, FirstSegmentWithoutInputGradStillTrainsItsParameters) {
  nn::Sequential model = mlp_with_dropout(6);
  mt::Generator g(10);
  const mt::Tensor x = mt::randn({8, 12}, {}, &g);  // data: no grad
  const mt::Tensor target = mt::randint(0, 5, {8}, {.dtype = mt::kInt64}, &g);
  auto loss = [&](const mt::Tensor& out) { return F::cross_entropy(out, target); };
  // Dropout generators advance; reset them between the two runs.
  const auto s2 = model.at<nn::Dropout>(2)->generator().state(), s5 = model.at<nn::Dropout>(5)->generator().state();
  const auto plain = step(model, x, loss, mt::kBFloat16);
  model.at<nn::Dropout>(2)->generator().set_state(s2);
  model.at<nn::Dropout>(5)->generator().set_state(s5);
  model.set_checkpoint_segments(7);  // one child per segment
  expect_same(plain, step(model, x, loss, mt::kBFloat16));
}

TEST(ActivationCheckpoint, KeepsFewerBytesAfterTheForward) {
  mt::Generator init(4);
  nn::GPT gpt({.vocab_size = 32, .context = 64, .embed_dim = 64, .num_layers = 4, .num_heads = 4}, &init);
  const mt::Tensor x = tokens(4, 64, 32, 1);
  auto held_after_forward = [&] {
    const int64_t before = mt::memory::stats(x.device()).current_bytes;
    mt::Tensor logits = gpt.forward(x);
    return mt::memory::stats(x.device()).current_bytes - before;
  };
  const int64_t plain = held_after_forward();
  gpt.set_checkpoint_activations(true);
  const int64_t ckpt = held_after_forward();
  // Plain keeps every block's activations; checkpointed keeps 3 block inputs [4, 64, 64] fp32 and the
  // last block's activations: well under half here.
  EXPECT_LT(ckpt * 2, plain) << "checkpointed " << ckpt << " bytes, plain " << plain;
  EXPECT_GT(ckpt, 3 * 4 * 64 * 64 * 4) << "the block inputs must be kept";
}

TEST(ActivationCheckpoint, WithoutGradModeTheModulesSimplyRun) {
  nn::Sequential a = mlp_with_dropout(7), b = mlp_with_dropout(7);
  a.eval();
  b.eval();
  b.set_checkpoint_segments(2);
  mt::Generator g(1);
  const mt::Tensor x = mt::randn({3, 12}, {}, &g);
  mt::NoGradGuard no_grad;
  const mt::Tensor ya = a.forward(x), yb = b.forward(x);
  EXPECT_TRUE(same_bits(ya, yb));
  EXPECT_FALSE(yb.requires_grad());
}

TEST(ActivationCheckpoint, RefusesBatchNormInTraining) {
  nn::Sequential m;
  m.push_back(nn::Conv2d(1, 2, 3));
  m.push_back(nn::BatchNorm2d(2));
  m.push_back(nn::ReLU());
  m.push_back(nn::Flatten());
  m.set_checkpoint_segments(2);
  const mt::Tensor x = mt::randn({2, 1, 5, 5});
  mt::testing::expect_error([&] { (void)m.forward(x); }, {"BatchNorm2d", "running statistics"});
  m.eval();  // running statistics frozen: recomputing is harmless
  EXPECT_NO_THROW((void)m.forward(x));
}

TEST(ActivationCheckpoint, InputModifiedInPlaceBeforeBackwardIsAnError) {
  nn::Sequential m = mlp_with_dropout(8);
  m.set_checkpoint_segments(2);
  mt::Tensor x = mt::randn({2, 12}).requires_grad_(true);
  mt::Tensor h = x * 2.0;  // a non-leaf that the checkpoint saves
  mt::Tensor loss = mt::sum(m.forward(h));
  {
    mt::NoGradGuard no_grad;
    h.mul_(2.0);
  }
  mt::testing::expect_error([&] { loss.backward(); }, {"checkpoint", "modified by an in-place operation"});
}

TEST(ActivationCheckpoint, OtherModulesHaveNoSegments) {
  nn::Linear lin(2, 2);
  mt::testing::expect_error([&] { nn::set_activation_checkpointing(lin, true); }, {"no segments"});
  EXPECT_NO_THROW(nn::set_activation_checkpointing(lin, false));
  nn::Sequential seq = mlp_with_dropout(1);
  nn::set_activation_checkpointing(seq, true);
  EXPECT_EQ(seq.checkpoint_segments(), 3);  // ceil(sqrt(7))
  mt::testing::expect_error([&] { seq.set_checkpoint_segments(-1); }, {"checkpoint segments", ">= 0"});
}

}  // namespace
