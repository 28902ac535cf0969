// TrainSummary::peak_breakdown: what the bytes at the training peak were for. The model state is
// exact (parameters, masters and AdamW's moments are known to the byte), every category is counted
// once (the parts add up to peak_bytes), and the peak names an op, its module and the phase. The
// model is built on the CPU and moved to the device under test, as a user's program does.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mixtrain/mixtrain.h"
#include "support/random_tokens.h"
#include "support/checked_device.h"

namespace mt = mixtrain;
namespace tr = mixtrain::train;
using mt::memory::Category;

namespace {

constexpr int64_t kVocab = 500, kContext = 16;

const mt::data::TokenFileDataset& tokens() {
  static const mt::data::TokenFileDataset ds = mt::testing::random_tokens(3000, kContext, kVocab, 5);
  return ds;
}

struct Run {
  tr::TrainSummary summary;
  std::vector<Category> grad_categories;  // of every parameter's .grad after training
};

Run train(tr::Precision precision, mt::DType param_dtype, bool fused) {
  mt::Generator g(4);
  mt::nn::GPT model(
      mt::nn::GPTConfig{.vocab_size = kVocab, .context = kContext, .embed_dim = 32, .num_layers = 2, .num_heads = 2}, &g);
  model.to(mixtrain::testing::test_device());
  tr::TrainerOptions o;
  o.batch_size = 8;
  o.max_steps = 3;
  o.tensorboard = false;
  o.precision.precision = precision;
  o.precision.param_dtype = param_dtype;
  o.fused_lm_head = fused;
  o.fused_lm_head_block_rows = 32;  // 128 rows per step: four blocks
  tr::Trainer trainer(model, tr::adamw(1e-3, 0.01), tokens(), nullptr, o);
  Run r{trainer.fit(), {}};
  for (const mt::Tensor& p : model.parameters()) r.grad_categories.push_back(p.grad().storage()->category());
  return r;
}

void expect_breakdown(const Run& r, int64_t params, int64_t param_bytes, int64_t master_bytes) {
  const tr::TrainSummary& s = r.summary;
  const mt::memory::Breakdown& b = s.peak_breakdown;
  EXPECT_EQ(b.total_bytes, s.peak_bytes);
  int64_t sum = b.op_temporary_bytes;
  for (int c = 0; c < mt::memory::kNumCategories; ++c) {
    SCOPED_TRACE(mt::memory::to_string(static_cast<Category>(c)));
    EXPECT_GE(b.bytes[static_cast<size_t>(c)], 0);
    sum += b.bytes[static_cast<size_t>(c)];
  }
  EXPECT_EQ(sum, s.peak_bytes);
  // The model state, to the byte: the peak is in a step after the first (the moments exist then).
  EXPECT_EQ(b[Category::kParameters], params * param_bytes);
  EXPECT_EQ(b[Category::kMasterWeights], params * master_bytes);
  EXPECT_EQ(b[Category::kOptimizerState], params * 8);  // AdamW's two fp32 moments
  // Gradients are created during backward (zero_grad drops them): none to one per parameter at the
  // peak (the fused head's is in its forward, before any), and each .grad is labelled a gradient.
  EXPECT_LE(b[Category::kGradients], params * param_bytes);
  for (Category c : r.grad_categories) EXPECT_EQ(c, Category::kGradients);
  EXPECT_GT(b[Category::kActivations], 0);
  // The peak is inside the step's forward or backward, in a named op of a named module.
  EXPECT_TRUE(b.phase == Category::kActivations || b.phase == Category::kActivationGradients)
      << mt::memory::phase_name(b.phase);
  EXPECT_FALSE(b.op.empty());
  EXPECT_FALSE(b.module.empty());
  EXPECT_GE(b.cached_bytes, 0);
  // summary.json holds the same numbers.
  const nlohmann::json j = nlohmann::json::parse(s.to_json())["peak_breakdown"];
  EXPECT_EQ(j["total_bytes"].get<int64_t>(), s.peak_bytes);
  EXPECT_EQ(j["parameters"].get<int64_t>(), b[Category::kParameters]);
  EXPECT_EQ(j["optimizer_state"].get<int64_t>(), b[Category::kOptimizerState]);
  EXPECT_EQ(j["op_temporaries"].get<int64_t>(), b.op_temporary_bytes);
  EXPECT_EQ(j["op"].get<std::string>(), b.op);
  EXPECT_EQ(j["module"].get<std::string>(), b.module);
  EXPECT_EQ(j["phase"].get<std::string>(), mt::memory::phase_name(b.phase));
}

int64_t gpt_params() {
  mt::Generator g(4);
  return mt::nn::GPT(
             mt::nn::GPTConfig{.vocab_size = kVocab, .context = kContext, .embed_dim = 32, .num_layers = 2, .num_heads = 2},
             &g)
      .num_parameters();
}

TEST(TrainerMemoryBreakdown, Fp32ModelStateIsExact) {
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused head" : "unfused head");
    expect_breakdown(train(tr::Precision::kFp32, mt::kFloat32, fused), gpt_params(), 4, 0);
  }
}

TEST(TrainerMemoryBreakdown, Bf16ParametersHaveFp32Masters) {
  expect_breakdown(train(tr::Precision::kBf16, mt::kBFloat16, true), gpt_params(), 2, 4);
}

TEST(TrainerMemoryBreakdown, TheUnfusedHeadsPeakIsTheLogits) {
  // The whole logits [8 * 16, 500] in fp32 are the largest tensors of the unfused step: its peak
  // has at least them (and their gradient) beyond the fused step's, in activations and gradients.
  const tr::TrainSummary fused = train(tr::Precision::kFp32, mt::kFloat32, true).summary,
                         plain = train(tr::Precision::kFp32, mt::kFloat32, false).summary;
  EXPECT_GT(plain.peak_bytes, fused.peak_bytes);
  const int64_t logits = 8 * kContext * kVocab * 4;
  const auto activity = [](const mt::memory::Breakdown& b) {
    return b[Category::kActivations] + b[Category::kActivationGradients] + b.op_temporary_bytes;
  };
  EXPECT_GE(activity(plain.peak_breakdown) - activity(fused.peak_breakdown), logits);
}

}  // namespace
