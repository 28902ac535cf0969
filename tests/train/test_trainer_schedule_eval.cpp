// TrainerOptions::warmup_steps (linear warmup from 0, then the cosine or constant schedule) and
// eval_every (validation during training, in StepInfo, metrics.jsonl and the summary).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>
#include <vector>

#include "data/file_helpers.h"
#include "mixtrain/mixtrain.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
namespace tr = mixtrain::train;
using mt::testing::TempDir;
using json = nlohmann::json;

namespace {

std::shared_ptr<mt::nn::Sequential> small_model() {
  mt::manual_seed(4);
  return std::make_shared<mt::nn::Sequential>(mt::nn::Flatten(), mt::nn::Linear(16, 8), mt::nn::ReLU(),
                                              mt::nn::Linear(8, 4));
}

const mt::data::SyntheticDataset& train_set() {
  static const mt::data::SyntheticDataset ds(64, {1, 4, 4}, 4, /*seed=*/6);
  return ds;
}
const mt::data::SyntheticDataset& eval_set() {
  static const mt::data::SyntheticDataset ds(24, {1, 4, 4}, 4, /*seed=*/7);
  return ds;
}

// The lr of every step (StepInfo::lr: the lr the step used).
std::vector<double> lrs(tr::LrDecay decay, double min_factor, int64_t warmup, int64_t steps) {
  auto model = small_model();
  tr::TrainerOptions o;
  o.batch_size = 16;
  o.max_steps = steps;
  o.lr_decay = decay;
  o.lr_min_factor = min_factor;
  o.warmup_steps = warmup;
  std::vector<double> out;
  o.on_step = [&](const tr::StepInfo& i) { out.push_back(i.lr); };
  tr::Trainer trainer(*model, tr::adamw(0.5, 0.0), train_set(), nullptr, o);
  trainer.fit();
  return out;
}

}  // namespace

TEST(TrainerWarmup, LinearFromZeroThenTheDecay) {
  constexpr double lr0 = 0.5;
  constexpr int64_t W = 4, T = 12;
  for (const double f : {0.0, 0.1}) {
    SCOPED_TRACE("min factor " + std::to_string(f));
    const std::vector<double> got = lrs(tr::LrDecay::kCosine, f, W, T);
    ASSERT_EQ(got.size(), static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      // transformers' get_cosine_with_min_lr_schedule_with_warmup, written out here independently.
      const double want = t < W ? lr0 * double(t) / double(W)
                                : lr0 * (f + (1 - f) * 0.5 * (1 + std::cos(std::numbers::pi * double(t - W) / double(T - W))));
      EXPECT_NEAR(got[t], want, 1e-15) << "step " << t;
    }
    EXPECT_EQ(got[0], 0.0);   // warmup starts at 0
    EXPECT_EQ(got[W], lr0);   // and reaches the peak lr at step W, where the decay starts
  }
  const std::vector<double> constant = lrs(tr::LrDecay::kConstant, 0.0, W, T);
  for (int64_t t = 0; t < T; ++t) EXPECT_EQ(constant[t], t < W ? lr0 * double(t) / double(W) : lr0) << t;
  // Without warmup the cosine schedule is the one it always was: lr_0 at step 0.
  const std::vector<double> plain = lrs(tr::LrDecay::kCosine, 0.1, 0, T);
  EXPECT_EQ(plain[0], lr0);
  EXPECT_NEAR(plain[6], lr0 * (0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 6.0 / 12.0))), 1e-15);
}

TEST(TrainerWarmup, CosineNeedsStepsAfterTheWarmup) {
  auto model = small_model();
  tr::TrainerOptions o;
  o.batch_size = 16;
  o.max_steps = 8;
  o.warmup_steps = 8;
  o.lr_decay = tr::LrDecay::kCosine;
  mt::testing::expect_error([&] { tr::Trainer(*model, tr::adamw(), train_set(), nullptr, o); },
                            {"warmup_steps (8) must be fewer than the run's 8 steps"});
  o.lr_decay = tr::LrDecay::kConstant;  // a run that only warms up is fine without a decay
  tr::Trainer ok(*model, tr::adamw(), train_set(), nullptr, o);
  o.warmup_steps = -1;
  mt::testing::expect_error([&] { tr::Trainer(*model, tr::adamw(), train_set(), nullptr, o); },
                            {"warmup_steps must be >= 0"});
}

TEST(TrainerEvalEvery, EvaluatesEveryNStepsAndAtTheEndIntoEveryOutput) {
  TempDir dir;
  auto model = small_model();
  tr::TrainerOptions o;
  o.batch_size = 16;      // 4 steps an epoch
  o.max_steps = 10;
  o.eval_every = 4;       // steps 4 and 8 end epochs too: evaluated once each
  o.eval_batch_size = 8;  // 3 evaluation batches
  o.out_dir = dir.path();
  std::vector<int64_t> evaluated;
  std::vector<tr::EvalResult> results;
  int epoch_evals = 0;
  o.on_step = [&](const tr::StepInfo& i) {
    if (!i.eval) return;
    evaluated.push_back(i.step);
    results.push_back(*i.eval);
  };
  o.on_epoch = [&](const tr::EpochInfo& e) { epoch_evals += e.eval.has_value(); };
  tr::Trainer trainer(*model, tr::adamw(1e-2), train_set(), &eval_set(), o);
  const tr::TrainSummary s = trainer.fit();
  EXPECT_EQ(evaluated, (std::vector<int64_t>{4, 8, 10}));
  EXPECT_EQ(epoch_evals, 2);  // the epoch ends at 4 and 8 report the evaluation of their step
  ASSERT_EQ(s.evals.size(), 3u);
  EXPECT_EQ(s.evals[2].step, 10);
  EXPECT_EQ(s.evals[2].result.loss, *s.test_loss);
  // The evaluation is the model's at that step: the loss changes as it trains.
  EXPECT_NE(results[0].loss, results[2].loss);
  for (const tr::EvalResult& r : results) {
    EXPECT_EQ(r.samples, 24);
    ASSERT_TRUE(r.accuracy.has_value());
    EXPECT_FALSE(r.per_token());
  }

  std::ifstream in(dir.file("metrics.jsonl"));
  std::string line;
  std::vector<int64_t> with_eval;
  int lines = 0;
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    ++lines;
    for (const char* key : {"skipped_total", "samples_per_s", "peak_mib", "step_ms"}) EXPECT_TRUE(j.contains(key)) << key;
    EXPECT_EQ(j["samples_per_s"].get<double>() > 0, true);
    EXPECT_FALSE(j.contains("tokens_per_s"));  // a classifier has one target per example
    if (!j.contains("eval_loss")) continue;
    with_eval.push_back(j["step"].get<int64_t>());
    EXPECT_TRUE(j.contains("eval_accuracy"));
    EXPECT_FALSE(j.contains("eval_perplexity"));
  }
  EXPECT_EQ(lines, 10);
  EXPECT_EQ(with_eval, evaluated);
  const json summary = json::parse(std::ifstream(dir.file("summary.json")));
  ASSERT_EQ(summary["evals"].size(), 3u);
  EXPECT_EQ(summary["evals"][1]["step"], 8);
  EXPECT_EQ(summary["evals"][1]["loss"].get<double>(), results[1].loss);
}

TEST(TrainerEvalEvery, ALanguageModelReportsPerplexityAndTokens) {
  mt::manual_seed(3);
  mt::nn::GPTConfig c{.context = 8, .embed_dim = 16, .num_layers = 1, .num_heads = 2};
  mt::nn::GPT model(c);
  std::string text;
  for (int i = 0; i < 400; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  const mt::data::TextDataset train = mt::data::TextDataset::from_string(text, 8);
  const mt::data::TextDataset val = mt::data::TextDataset::from_string(text.substr(0, 100), 8);
  TempDir dir;
  tr::TrainerOptions o;
  o.batch_size = 4;
  o.max_steps = 3;
  o.eval_every = 3;
  o.out_dir = dir.path();
  tr::Trainer trainer(model, tr::adamw(1e-2), train, &val, o);
  trainer.fit();
  std::ifstream in(dir.file("metrics.jsonl"));
  std::string line, last;
  while (std::getline(in, line)) last = line;
  const json j = json::parse(last);
  ASSERT_TRUE(j.contains("eval_perplexity"));
  EXPECT_NEAR(j["eval_perplexity"].get<double>(), std::exp(j["eval_loss"].get<double>()), 1e-9);
  EXPECT_NEAR(j["tokens_per_s"].get<double>(), 8 * j["samples_per_s"].get<double>(), 1e-6 * j["tokens_per_s"].get<double>());
}
