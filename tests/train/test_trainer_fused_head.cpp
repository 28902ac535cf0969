// TrainerOptions::fused_lm_head: the Trainer computes a language model's head and loss with
// linear_cross_entropy (the logits never whole). Against the unfused steps (fused_lm_head = false)
// for nn::GPT (an untied head with a bias) and nn::GPT2 (the head tied to the token embedding):
// the same training in fp32 within rounding, in bf16/fp16 within the precision's own effect, a
// lower peak, and the unfused path for any other loss.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "mixtrain/mixtrain.h"
#include "support/random_tokens.h"
#include "support/tolerances.h"

namespace mt = mixtrain;
namespace tr = mixtrain::train;

namespace {

constexpr int64_t kVocab = 1000, kContext = 16;

const mt::data::TokenFileDataset& tokens() {
  static const mt::data::TokenFileDataset ds = mt::testing::random_tokens(4000, kContext, kVocab, 7);
  return ds;
}

std::shared_ptr<mt::nn::Module> make_model(bool gpt2) {
  mt::Generator g(11);
  if (gpt2) {
    return std::make_shared<mt::nn::GPT2>(mt::nn::GPT2Config{.vocab_size = kVocab,
                                                             .n_positions = kContext,
                                                             .n_embd = 32,
                                                             .n_layer = 1,
                                                             .n_head = 2,
                                                             .embd_pdrop = 0.0,
                                                             .resid_pdrop = 0.0},
                                          &g);
  }
  return std::make_shared<mt::nn::GPT>(
      mt::nn::GPTConfig{.vocab_size = kVocab, .context = kContext, .embed_dim = 32, .num_layers = 1, .num_heads = 2}, &g);
}

struct Result {
  std::vector<double> params;  // every parameter, flattened in state_dict order
  std::vector<double> losses;
  int64_t peak_bytes = 0;
};

Result train(bool gpt2, bool fused, tr::Precision precision = tr::Precision::kFp32, tr::LossFn loss = tr::default_loss) {
  std::shared_ptr<mt::nn::Module> model = make_model(gpt2);
  tr::TrainerOptions o;
  o.batch_size = 16;
  o.max_steps = 5;
  o.shuffle = false;
  o.tensorboard = false;
  o.precision.precision = precision;
  o.fused_lm_head = fused;
  o.fused_lm_head_block_rows = 48;  // 256 rows per step: five blocks of 48 and one of 16
  o.loss_fn = std::move(loss);
  Result r;
  o.on_step = [&](const tr::StepInfo& s) {
    r.losses.push_back(s.loss);
    r.peak_bytes = s.peak_bytes;
  };
  // SGD: the weights follow the gradients linearly, so their differences are the gradients' (Adam
  // would turn a rounding-level difference of a gradient that cancels to ~0 into a full-size update).
  const tr::OptimizerFactory sgd = [](std::vector<mt::optim::NamedParameter> params) {
    return std::make_unique<mt::optim::SGD>(std::move(params), mt::optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  };
  tr::Trainer trainer(*model, sgd, tokens(), nullptr, o);
  trainer.fit();
  for (const auto& [name, t] : model->state_dict()) {
    for (double v : t.to(mt::kFloat64).reshape({-1}).to_vector<double>()) r.params.push_back(v);
  }
  return r;
}

// Largest |a - b| / (|b| + 1e-3 * max|b|) over the parameters.
double max_relative_difference(const Result& a, const Result& b) {
  EXPECT_EQ(a.params.size(), b.params.size());
  double largest = 0, worst = 0;
  for (double v : b.params) largest = std::max(largest, std::abs(v));
  for (size_t i = 0; i < a.params.size() && i < b.params.size(); ++i) {
    if (!std::isfinite(a.params[i])) return INFINITY;
    worst = std::max(worst, std::abs(a.params[i] - b.params[i]) / (std::abs(b.params[i]) + 1e-3 * largest));
  }
  return worst;
}

TEST(TrainerFusedHead, Fp32TrainsAsTheUnfusedHead) {
  for (bool gpt2 : {false, true}) {
    SCOPED_TRACE(gpt2 ? "gpt2 (tied head)" : "gpt (untied head with a bias)");
    const Result fused = train(gpt2, true), plain = train(gpt2, false);
    ASSERT_EQ(fused.losses.size(), 5u);
    for (size_t i = 0; i < fused.losses.size(); ++i)
      EXPECT_NEAR(fused.losses[i], plain.losses[i], mt::testing::kFusedHeadVsUnfused.rtol * plain.losses[i]);
    const double diff = max_relative_difference(fused, plain);
    EXPECT_LE(diff, mt::testing::kFusedHeadVsUnfused.rtol);
    // The fused path did run: the blocks' weight gradients are summed in another order, so the
    // weights are not bit-identical.
    EXPECT_GT(diff, 0.0);
    std::printf("fp32 %s: fused vs unfused %.3g\n", gpt2 ? "gpt2" : "gpt", diff);
  }
}

TEST(TrainerFusedHead, SixteenBitIsAsCloseToFp32AsTheUnfusedHead) {
  for (bool gpt2 : {false, true}) {
    const Result fp32 = train(gpt2, false);
    for (tr::Precision p : {tr::Precision::kBf16, tr::Precision::kFp16}) {
      SCOPED_TRACE(std::string(gpt2 ? "gpt2 " : "gpt ") + (p == tr::Precision::kBf16 ? "bf16" : "fp16"));
      const Result fused = train(gpt2, true, p), plain = train(gpt2, false, p);
      const double plain_effect = max_relative_difference(plain, fp32);
      const double fused_effect = max_relative_difference(fused, fp32);
      EXPECT_GT(plain_effect, 0.0);
      EXPECT_LE(fused_effect, mt::testing::kFusedHeadVs16BitEffect * plain_effect);
      std::printf("%s %s: distance from fp32: fused %.3g, unfused %.3g; peak fused %lld, unfused %lld\n",
                  gpt2 ? "gpt2" : "gpt", p == tr::Precision::kBf16 ? "bf16" : "fp16", fused_effect, plain_effect,
                  static_cast<long long>(fused.peak_bytes), static_cast<long long>(plain.peak_bytes));
      // Never holding the [16, 16, 1000] logits, their fp32 copy and their gradients lowers the peak
      // by more than one fp32 logits tensor.
      EXPECT_LT(fused.peak_bytes, plain.peak_bytes - 16 * kContext * kVocab * 4);
    }
  }
}

TEST(TrainerFusedHead, AnotherLossRunsTheModelsForward) {
  // The same loss behind another function: not recognised as the default, so the unfused path runs,
  // bit for bit the fused_lm_head = false run.
  const tr::LossFn wrapped = [](const mt::Tensor& out, const mt::Tensor& target) {
    return tr::default_loss(out, target);
  };
  const Result custom = train(false, true, tr::Precision::kFp32, wrapped), plain = train(false, false);
  EXPECT_EQ(custom.params, plain.params);
  EXPECT_EQ(custom.losses, plain.losses);
}

}  // namespace
