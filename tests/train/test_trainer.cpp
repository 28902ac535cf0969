// mt::train::Trainer: exact resume in every precision mode, output files, the scaler rule, the
// checks on bad configurations, and evaluation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>
#include <vector>

#include "data/file_helpers.h"
#include "mixtrain/io/checkpoint.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/nn/modules.h"
#include "mixtrain/train/trainer.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
namespace tr = mixtrain::train;
using mt::testing::TempDir;
using json = nlohmann::json;

namespace {

constexpr int64_t kBatch = 16;
constexpr int64_t kTrainSize = 96;  // 6 batches per epoch: the runs below cross an epoch boundary

// A small classifier with a Dropout, so that resuming must also restore a module generator.
std::shared_ptr<mt::nn::Sequential> tiny_model(uint64_t seed) {
  mt::manual_seed(seed);  // Linear init and the Dropout's own seed come from the default generator
  return std::make_shared<mt::nn::Sequential>(mt::nn::Flatten(), mt::nn::Linear(16, 32), mt::nn::ReLU(),
                                              mt::nn::Dropout(0.2), mt::nn::Linear(32, 4));
}

const mt::data::SyntheticDataset& train_set() {
  static const mt::data::SyntheticDataset ds(kTrainSize, {1, 4, 4}, 4, /*seed=*/3);
  return ds;
}
const mt::data::SyntheticDataset& eval_set() {
  static const mt::data::SyntheticDataset ds(40, {1, 4, 4}, 4, /*seed=*/4);
  return ds;
}

std::string bytes_of(const mt::Tensor& t) {
  mt::Tensor c = t.to(mt::Device{}).contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

// Everything a resumed run must reproduce: parameters, optimizer state, scaler, statistics.
struct Snapshot {
  std::vector<std::pair<std::string, std::string>> tensors;  // name -> raw bytes
  std::vector<int64_t> optimizer_steps;
  double scale = 0;
  tr::TrainSummary summary;
};

struct RunSpec {
  tr::PrecisionConfig precision;
  int64_t max_steps = 9;
  std::string out_dir;
  std::string resume_from;
  int64_t checkpoint_every = 0;
  uint64_t init_seed = 1;
  tr::LrDecay lr_decay = tr::LrDecay::kConstant;
  double lr_min_factor = 0.0;
  std::vector<double>* lrs = nullptr;  // receives each step's lr
};

Snapshot run(const RunSpec& spec) {
  auto model = tiny_model(spec.init_seed);
  tr::TrainerOptions o;
  o.precision = spec.precision;
  o.batch_size = kBatch;
  o.max_steps = spec.max_steps;
  o.seed = 5;
  o.out_dir = spec.out_dir;
  o.resume_from = spec.resume_from;
  o.checkpoint_every = spec.checkpoint_every;
  o.timing_warmup_steps = 0;
  o.lr_decay = spec.lr_decay;
  o.lr_min_factor = spec.lr_min_factor;
  if (spec.lrs) o.on_step = [lrs = spec.lrs](const tr::StepInfo& info) { lrs->push_back(info.lr); };
  tr::Trainer trainer(*model, tr::adamw(1e-2, 0.01), train_set(), &eval_set(), o);
  Snapshot s;
  s.summary = trainer.fit();
  for (const auto& [name, t] : model->state_dict()) s.tensors.emplace_back("model." + name, bytes_of(t));
  const mt::optim::OptimizerStateDict osd = trainer.optimizer().state_dict();
  for (size_t i = 0; i < osd.state.size(); ++i) {
    s.optimizer_steps.push_back(osd.state[i].step);
    for (const auto& [key, t] : osd.state[i].named_tensors())
      s.tensors.emplace_back("optim." + std::to_string(i) + "." + key, bytes_of(t));
  }
  s.scale = trainer.scaler().get_scale();
  return s;
}

void expect_identical(const Snapshot& a, const Snapshot& b, const std::string& what) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size()) << what;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].first, b.tensors[i].first) << what;
    EXPECT_TRUE(a.tensors[i].second == b.tensors[i].second) << what << ": " << a.tensors[i].first << " differs";
  }
  EXPECT_EQ(a.optimizer_steps, b.optimizer_steps) << what;
  EXPECT_EQ(a.scale, b.scale) << what;
  EXPECT_EQ(a.summary.steps, b.summary.steps) << what;
  EXPECT_EQ(a.summary.skipped_steps, b.summary.skipped_steps) << what;
  EXPECT_EQ(a.summary.final_loss, b.summary.final_loss) << what;
  EXPECT_EQ(a.summary.test_accuracy, b.summary.test_accuracy) << what;
}

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) out.push_back(json::parse(line));
  return out;
}

struct ResumeCase {
  const char* name;
  tr::PrecisionConfig precision;
};

class TrainerResume : public ::testing::TestWithParam<ResumeCase> {};

}  // namespace

// N = 4 steps, checkpoint, resume to N + M = 9 steps (across the epoch boundary after step 6)
// equals 9 steps straight, bit for bit: from the final checkpoint of a 4-step run and from the
// checkpoint-4 file a straight run wrote on the way.
TEST_P(TrainerResume, ResumeEqualsStraightRunBitForBit) {
  const tr::PrecisionConfig precision = GetParam().precision;
  TempDir dir;
  const std::string straight_dir = dir.file("straight"), split_dir = dir.file("split"), mid_dir = dir.file("mid");

  const Snapshot straight = run({.precision = precision, .out_dir = straight_dir, .checkpoint_every = 4});
  run({.precision = precision, .max_steps = 4, .out_dir = split_dir});
  // Different initial weights: everything must come from the checkpoint.
  const Snapshot resumed = run({.precision = precision,
                                .out_dir = split_dir,
                                .resume_from = split_dir + "/checkpoint.safetensors",
                                .init_seed = 99});
  const Snapshot from_mid = run({.precision = precision,
                                 .out_dir = mid_dir,
                                 .resume_from = straight_dir + "/checkpoint-4.safetensors",
                                 .init_seed = 7});
  expect_identical(straight, resumed, "resumed from the final checkpoint of a 4-step run");
  expect_identical(straight, from_mid, "resumed from checkpoint-4 of the straight run");
  EXPECT_EQ(resumed.summary.steps_this_run, 5);
  EXPECT_EQ(resumed.summary.resumed_from, split_dir + "/checkpoint.safetensors");

  // The resumed run's metrics continue the first run's: one line per step, the same losses.
  const std::vector<json> a = read_jsonl(straight_dir + "/metrics.jsonl"), b = read_jsonl(split_dir + "/metrics.jsonl");
  ASSERT_EQ(a.size(), 9u);
  ASSERT_EQ(b.size(), 9u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i]["step"], static_cast<int64_t>(i + 1));
    EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << "step " << i + 1;
    EXPECT_EQ(a[i]["scale"], b[i]["scale"]) << "step " << i + 1;
    EXPECT_EQ(a[i]["skipped"], b[i]["skipped"]) << "step " << i + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Precisions, TrainerResume,
    ::testing::Values(ResumeCase{"fp32", {.precision = tr::Precision::kFp32}},
                      ResumeCase{"bf16", {.precision = tr::Precision::kBf16}},
                      // A 2^24 initial scale makes the first fp16 steps overflow: skipped steps and
                      // backoff are part of what must be restored; a short growth interval moves it up.
                      ResumeCase{"fp16",
                                 {.precision = tr::Precision::kFp16,
                                  .scaler_options = {.init_scale = 16777216.0, .growth_interval = 2}}},
                      ResumeCase{"bf16_master", {.precision = tr::Precision::kBf16, .param_dtype = mt::kBFloat16}},
                      ResumeCase{
                          "bf16_compact",
                          {.precision = tr::Precision::kBf16, .param_dtype = mt::kBFloat16, .compact_state = true}},
                      ResumeCase{"fp16_master",
                                 {.precision = tr::Precision::kFp16,
                                  .param_dtype = mt::kFloat16,
                                  .scaler_options = {.init_scale = 16777216.0, .growth_interval = 2}}}),
    [](const ::testing::TestParamInfo<ResumeCase>& info) { return std::string(info.param.name); });

// Cosine decay is a closed form of the global step, the run's total steps and the optimizer's
// initial lr, so a run resumed from a mid-run checkpoint (which holds an already-decayed lr)
// continues the same curve and ends with the same parameters.
TEST(Trainer, CosineDecayFollowsItsFormulaAcrossAResume) {
  TempDir dir;
  std::vector<double> straight_lrs, resumed_lrs;
  Snapshot straight = run({.max_steps = 9,
                           .out_dir = dir.path(),
                           .checkpoint_every = 4,
                           .lr_decay = tr::LrDecay::kCosine,
                           .lrs = &straight_lrs});
  ASSERT_EQ(straight_lrs.size(), 9u);
  for (int t = 0; t < 9; ++t)
    EXPECT_DOUBLE_EQ(straight_lrs[t], 1e-2 * 0.5 * (1.0 + std::cos(std::numbers::pi * t / 9.0))) << "step " << t;
  Snapshot resumed = run({.max_steps = 9,
                          .resume_from = dir.file("checkpoint-4.safetensors"),
                          .lr_decay = tr::LrDecay::kCosine,
                          .lrs = &resumed_lrs});
  ASSERT_EQ(resumed_lrs.size(), 5u);
  for (int t = 0; t < 5; ++t) EXPECT_EQ(resumed_lrs[t], straight_lrs[4 + t]) << "step " << 4 + t;
  expect_identical(straight, resumed, "cosine decay resumed");
}

// lr_min_factor raises the floor of the cosine: lr_0 at step 0, lr_0 * f after the last step.
TEST(Trainer, CosineDecayEndsAtItsMinFactor) {
  std::vector<double> lrs;
  run({.max_steps = 9, .lr_decay = tr::LrDecay::kCosine, .lr_min_factor = 0.25, .lrs = &lrs});
  ASSERT_EQ(lrs.size(), 9u);
  for (int t = 0; t < 9; ++t)
    EXPECT_DOUBLE_EQ(lrs[t], 1e-2 * (0.25 + 0.75 * 0.5 * (1.0 + std::cos(std::numbers::pi * t / 9.0)))) << "step " << t;
  EXPECT_DOUBLE_EQ(lrs[0], 1e-2);
  EXPECT_GT(lrs[8], 0.25e-2);  // the last step is one step short of the floor
  // summary.json names the schedule, so a result says how it was trained.
  const Snapshot s = run({.max_steps = 2, .lr_decay = tr::LrDecay::kCosine, .lr_min_factor = 0.25});
  EXPECT_EQ(s.summary.lr_decay, "cosine");
  const nlohmann::json j = nlohmann::json::parse(s.summary.to_json());
  EXPECT_EQ(j.at("lr_decay"), "cosine");
  EXPECT_EQ(j.at("lr_min_factor"), 0.25);
  const nlohmann::json constant = nlohmann::json::parse(run({.max_steps = 2}).summary.to_json());
  EXPECT_EQ(constant.at("lr_decay"), "constant");
  EXPECT_TRUE(constant.at("lr_min_factor").is_null());
}

TEST(Trainer, LrMinFactorOutsideZeroToOneIsRefused) {
  for (double f : {-0.1, 1.5}) {
    auto model = tiny_model(1);
    tr::TrainerOptions o;
    o.lr_decay = tr::LrDecay::kCosine;
    o.lr_min_factor = f;
    EXPECT_MT_ERROR(tr::Trainer(*model, tr::adamw(), train_set(), nullptr, o), "lr_min_factor must be in [0, 1]");
  }
}

TEST(Trainer, Fp16HugeScaleSkipsAndBacksOff) {
  // Guards the fp16 resume case above: it must really exercise skipped steps.
  const Snapshot s = run({.precision = {.precision = tr::Precision::kFp16,
                                        .scaler_options = {.init_scale = 16777216.0, .growth_interval = 2}}});
  EXPECT_GT(s.summary.skipped_steps, 0);
  EXPECT_LT(s.summary.final_scale, 16777216.0);
}

TEST(Trainer, ScalerAutoRule) {
  using tr::Precision;
  using tr::ScalerMode;
  EXPECT_FALSE(tr::uses_scaler(Precision::kFp32, ScalerMode::kAuto));
  EXPECT_FALSE(tr::uses_scaler(Precision::kBf16, ScalerMode::kAuto));
  EXPECT_TRUE(tr::uses_scaler(Precision::kFp16, ScalerMode::kAuto));
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    EXPECT_TRUE(tr::uses_scaler(p, ScalerMode::kOn));
    EXPECT_FALSE(tr::uses_scaler(p, ScalerMode::kOff));
  }
  // The Trainer applies the rule to its GradScaler.
  auto model = tiny_model(1);
  tr::Trainer bf16(*model, tr::adamw(), train_set(), nullptr,
                   {.precision = {.precision = Precision::kBf16}, .batch_size = kBatch});
  EXPECT_FALSE(bf16.scaler().is_enabled());
  auto model2 = tiny_model(1);
  tr::Trainer fp16(*model2, tr::adamw(), train_set(), nullptr,
                   {.precision = {.precision = Precision::kFp16}, .batch_size = kBatch});
  EXPECT_TRUE(fp16.scaler().is_enabled());
  auto model3 = tiny_model(1);
  tr::Trainer off(*model3, tr::adamw(), train_set(), nullptr,
                  {.precision = {.precision = Precision::kFp16, .scaler = ScalerMode::kOff}, .batch_size = kBatch});
  EXPECT_FALSE(off.scaler().is_enabled());
}

TEST(Trainer, PrecisionNamesAndValidation) {
  EXPECT_EQ(tr::parse_precision("bf16"), tr::Precision::kBf16);
  EXPECT_EQ(tr::to_string(tr::Precision::kFp16), "fp16");
  EXPECT_EQ(tr::parse_param_dtype("fp16"), mt::kFloat16);
  EXPECT_EQ(tr::parse_precision("fp8"), tr::Precision::kFp8);
  EXPECT_EQ(tr::to_string(tr::Precision::kFp8), "fp8");
  EXPECT_EQ(tr::autocast_dtype(tr::Precision::kFp8), mt::kBFloat16) << "the layers that are not FP8 run in bf16";
  EXPECT_FALSE(tr::uses_scaler(tr::Precision::kFp8, tr::ScalerMode::kAuto));
  EXPECT_THROW(tr::parse_precision("fp4"), mt::Error);
  EXPECT_THROW(tr::validate({.precision = tr::Precision::kFp8, .fp8 = {.margin = 99}}), mt::Error);
  EXPECT_NO_THROW(tr::validate({.precision = tr::Precision::kFp8, .param_dtype = mt::kBFloat16}));
  EXPECT_THROW(tr::parse_scaler_mode("maybe"), mt::Error);
  EXPECT_NO_THROW(tr::validate({.precision = tr::Precision::kBf16, .param_dtype = mt::kBFloat16}));
  EXPECT_THROW(tr::validate({.precision = tr::Precision::kBf16, .param_dtype = mt::kFloat16}), mt::Error);
  EXPECT_THROW(tr::validate({.precision = tr::Precision::kFp32, .param_dtype = mt::kBFloat16}), mt::Error);
  // Compact state packs the master into a bf16 parameter: bf16 parameters only.
  EXPECT_NO_THROW(
      tr::validate({.precision = tr::Precision::kBf16, .param_dtype = mt::kBFloat16, .compact_state = true}));
  EXPECT_THROW(tr::validate({.precision = tr::Precision::kBf16, .compact_state = true}), mt::Error);
  EXPECT_THROW(tr::validate({.precision = tr::Precision::kFp16, .param_dtype = mt::kFloat16, .compact_state = true}),
               mt::Error);
}

TEST(Trainer, CompactStateHoldsTwelveBytesPerParameter) {
  // The three layouts on the same model, AdamW: model-state bytes per parameter after training.
  auto bytes_per_param = [](const tr::PrecisionConfig& p, tr::TrainSummary* out = nullptr) {
    auto model = tiny_model(1);
    tr::Trainer t(*model, tr::adamw(1e-2, 0.01), train_set(), nullptr,
                  {.precision = p, .max_steps = 2, .batch_size = kBatch});
    tr::TrainSummary s = t.fit();
    if (p.compact_state) {
      EXPECT_TRUE(t.optimizer().has_packed_masters());
      EXPECT_EQ(t.optimizer().state(0).exp_avg.dtype(), mt::kBFloat16);
      EXPECT_EQ(json::parse(s.to_json())["compact_state"], true);
    }
    if (out) *out = s;
    return s.model_state_bytes_per_param;
  };
  EXPECT_EQ(bytes_per_param({.precision = tr::Precision::kBf16}), 16.0);
  EXPECT_EQ(bytes_per_param({.precision = tr::Precision::kBf16, .param_dtype = mt::kBFloat16}), 16.0);
  tr::TrainSummary compact;
  EXPECT_EQ(bytes_per_param({.precision = tr::Precision::kBf16, .param_dtype = mt::kBFloat16, .compact_state = true},
                            &compact),
            12.0);
  EXPECT_EQ(compact.model_state_bytes, 12 * compact.num_parameters);

  // A compact run does not resume from a checkpoint written without compact state.
  TempDir dir;
  run({.precision = {.precision = tr::Precision::kBf16, .param_dtype = mt::kBFloat16},
       .max_steps = 2,
       .out_dir = dir.path()});
  EXPECT_MT_ERROR(
      run({.precision = {.precision = tr::Precision::kBf16, .param_dtype = mt::kBFloat16, .compact_state = true},
           .max_steps = 3,
           .resume_from = dir.file("checkpoint.safetensors")}),
      "compact_state = false in the checkpoint, true in this run");
}

TEST(Trainer, MasterWeightsNeedTheModelConvertedBeforeTheOptimizer) {
  auto model = tiny_model(1);
  mt::optim::AdamW opt(model->parameters());  // fp32 parameters: no masters
  const tr::PrecisionConfig p{.precision = tr::Precision::kBf16, .param_dtype = mt::kBFloat16};
  try {
    tr::Trainer t(*model, opt, train_set(), nullptr, {.precision = p, .batch_size = kBatch});
    FAIL() << "expected mt::Error";
  } catch (const mt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("prepare_model"), std::string::npos) << e.what();
  }
  // The documented order works, and the optimizer then holds fp32 masters.
  auto model2 = tiny_model(1);
  tr::prepare_model(*model2, p);
  mt::optim::AdamW opt2(model2->parameters());
  tr::Trainer t(*model2, opt2, train_set(), nullptr, {.precision = p, .max_steps = 2, .batch_size = kBatch});
  t.fit();
  EXPECT_EQ(opt2.state(1).master.dtype(), mt::kFloat32);
  EXPECT_EQ(model2->parameters()[0].dtype(), mt::kBFloat16);
}

TEST(Trainer, WritesMetricsSummaryAndWeights) {
  TempDir dir;
  const std::string out = dir.file("run");
  const Snapshot s = run({.precision = {.precision = tr::Precision::kFp16}, .max_steps = 7, .out_dir = out});

  const std::vector<json> metrics = read_jsonl(out + "/metrics.jsonl");
  ASSERT_EQ(metrics.size(), 7u);
  for (size_t i = 0; i < metrics.size(); ++i) {
    for (const char* key : {"step", "epoch", "loss", "lr", "scale", "skipped"})
      EXPECT_TRUE(metrics[i].contains(key)) << key;
    EXPECT_EQ(metrics[i]["step"], static_cast<int64_t>(i + 1));
    EXPECT_EQ(metrics[i]["epoch"], i < 6 ? 1 : 2);  // 6 batches per epoch
    EXPECT_EQ(metrics[i]["lr"], 1e-2);
    EXPECT_EQ(metrics[i]["scale"], 65536.0);
  }

  std::ifstream f(out + "/summary.json");
  const json summary = json::parse(f);
  for (const char* key : {"model", "precision", "epochs", "steps", "test_accuracy", "final_loss", "step_ms_median",
                          "samples_per_sec", "peak_bytes", "skipped_steps", "final_scale", "threads"})
    EXPECT_TRUE(summary.contains(key)) << key;
  EXPECT_EQ(summary["precision"], "fp16");
  EXPECT_EQ(summary["model"], "custom");
  EXPECT_EQ(summary["steps"], 7);
  EXPECT_DOUBLE_EQ(summary["epochs"].get<double>(), 7.0 / 6.0);
  EXPECT_EQ(summary["final_scale"], 65536.0);
  EXPECT_EQ(summary["skipped_steps"], 0);
  EXPECT_GT(summary["peak_bytes"].get<int64_t>(), 0);
  EXPECT_GT(summary["step_ms_median"].get<double>(), 0);
  EXPECT_GE(summary["threads"].get<int>(), 1);
  const double acc = summary["test_accuracy"].get<double>();
  EXPECT_TRUE(acc >= 0 && acc <= 1);
  // final_loss is the mean over the last (partial) epoch: here only step 7.
  EXPECT_DOUBLE_EQ(summary["final_loss"].get<double>(), metrics[6]["loss"].get<double>());

  // The weights file holds the state_dict and loads back into the model.
  const mt::io::SafetensorsFile weights = mt::io::load_safetensors(out + "/model.safetensors");
  auto model = tiny_model(42);
  EXPECT_NO_THROW(model->load_state_dict(weights.tensors));
  EXPECT_EQ(weights.metadata.at("precision"), "fp16");
}

TEST(Trainer, CheckpointEveryWritesLoadableFilesAtomically) {
  TempDir dir;
  const std::string out = dir.file("run");
  run({.precision = {.precision = tr::Precision::kBf16}, .max_steps = 7, .out_dir = out, .checkpoint_every = 2});
  std::vector<std::string> names;
  int event_files = 0;
  for (const auto& e : std::filesystem::directory_iterator(out)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("events.out.tfevents.")) ++event_files;  // its name holds the time, host and pid
    else names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(event_files, 1);
  // .mixtrain.lock: the run's lock on its directory (io::DirectoryLock), kept after it ends.
  EXPECT_EQ(names, (std::vector<std::string>{".mixtrain.lock", "checkpoint-2.safetensors", "checkpoint-4.safetensors",
                                             "checkpoint-6.safetensors", "checkpoint.safetensors", "metrics.jsonl",
                                             "model.safetensors", "summary.json"}));  // no temporary files left
  for (int step : {2, 4, 6}) {
    const mt::io::Checkpoint c = mt::io::load_checkpoint(out + "/checkpoint-" + std::to_string(step) + ".safetensors");
    EXPECT_EQ(c.meta_int("step"), step);
    EXPECT_EQ(c.meta_int("epoch"), step == 6 ? 1 : 0);  // step 6 ends epoch 0: resume at epoch 1, batch 0
    EXPECT_EQ(c.meta_int("batch"), step % 6);
    for (const char* key : {"optim", "scaler", "rng", "generators", "trainer"}) EXPECT_TRUE(c.metadata.contains(key));
    EXPECT_TRUE(c.tensors.contains("model.1.weight"));
    EXPECT_TRUE(c.tensors.contains("optim.0.exp_avg"));
  }
}

TEST(Trainer, ResumeRefusesOtherSettings) {
  TempDir dir;
  run({.precision = {.precision = tr::Precision::kFp32}, .max_steps = 2, .out_dir = dir.path()});
  try {
    run({.precision = {.precision = tr::Precision::kBf16}, .resume_from = dir.file("checkpoint.safetensors")});
    FAIL() << "expected mt::Error";
  } catch (const mt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("precision"), std::string::npos) << e.what();
  }
  // A weights-only file is not a checkpoint.
  EXPECT_THROW(run({.resume_from = dir.file("model.safetensors")}), mt::Error);
  EXPECT_THROW(run({.resume_from = dir.file("no-such-file.safetensors")}), mt::Error);
}

TEST(Trainer, StepsOverrideEpochsAndConfigErrors) {
  auto model = tiny_model(1);
  tr::Trainer t(*model, tr::adamw(), train_set(), nullptr, {.epochs = 3, .batch_size = kBatch});
  EXPECT_EQ(t.total_steps(), 18);
  auto model2 = tiny_model(1);
  tr::Trainer t2(*model2, tr::adamw(), train_set(), nullptr, {.epochs = 3, .max_steps = 4, .batch_size = kBatch});
  EXPECT_EQ(t2.total_steps(), 4);
  auto model3 = tiny_model(1);
  EXPECT_THROW(tr::Trainer(*model3, tr::adamw(), train_set(), nullptr, {.epochs = 0}), mt::Error);
  EXPECT_THROW(tr::Trainer(*model3, tr::adamw(), train_set(), nullptr, {.batch_size = 200, .drop_last = true}),
               mt::Error);
}

TEST(Trainer, EvaluateClassifierAndLanguageModel) {
  auto model = tiny_model(1);
  tr::Trainer t(*model, tr::adamw(), train_set(), nullptr, {.batch_size = kBatch, .eval_batch_size = 16});
  model->train();
  const tr::EvalResult r = t.evaluate(eval_set());
  EXPECT_TRUE(model->is_training());  // restored
  EXPECT_EQ(r.samples, 40);
  EXPECT_EQ(r.targets, 40);
  ASSERT_TRUE(r.accuracy.has_value());
  EXPECT_TRUE(std::isfinite(r.loss));

  // A tiny GPT on text: [B, T, V] logits against [B, T] targets, per-token loss and accuracy.
  const std::string text = "the quick brown fox jumps over the lazy dog. the quick brown fox jumps again. ";
  const auto lm_train = mt::data::TextDataset::from_string(text + text, 8, {.stride = 8});
  const auto lm_val = mt::data::TextDataset::from_string(text, 8, {.stride = 8});
  mt::Generator gen(0);
  mt::nn::GPT gpt({.vocab_size = 256, .context = 8, .embed_dim = 16, .num_layers = 1, .num_heads = 2}, &gen);
  tr::Trainer lm(gpt, tr::adamw(3e-3), lm_train, &lm_val,
                 {.precision = {.precision = tr::Precision::kBf16}, .max_steps = 3, .batch_size = 4});
  const tr::TrainSummary s = lm.fit();
  ASSERT_TRUE(s.test_loss.has_value());
  EXPECT_TRUE(std::isfinite(*s.test_loss));
  const tr::EvalResult e = lm.evaluate(lm_val);
  EXPECT_EQ(e.targets, e.samples * 8);
  EXPECT_NEAR(e.perplexity(), std::exp(e.loss), 1e-9);
  ASSERT_TRUE(e.accuracy.has_value());
}
