// The Trainer under faults and hostile input: diverging runs (the non-finite policy, and that no
// non-finite weights reach a file), crafted checkpoints (every loaded value range-checked, nothing
// echoed unbounded, no crash), resumes with other settings or data (refused, or overridden by name),
// output directories that belong to another run, stale temporaries, and a disk that fills up.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/file_helpers.h"
#include "mixtrain/io/checkpoint.h"
#include "mixtrain/io/file.h"
#include "mixtrain/mixtrain.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
namespace tr = mixtrain::train;
using json = nlohmann::json;
using mt::testing::TempDir;

namespace {

constexpr int64_t kBatch = 16;

std::shared_ptr<mt::nn::Sequential> small_model() {
  mt::manual_seed(1);
  return std::make_shared<mt::nn::Sequential>(mt::nn::Flatten(), mt::nn::Linear(16, 32), mt::nn::ReLU(),
                                              mt::nn::Linear(32, 4));
}

const mt::data::SyntheticDataset& data_a() {
  static const mt::data::SyntheticDataset ds(96, {1, 4, 4}, 4, /*seed=*/3);
  return ds;
}
// The same size and shapes, other values.
const mt::data::SyntheticDataset& data_b() {
  static const mt::data::SyntheticDataset ds(96, {1, 4, 4}, 4, /*seed=*/9);
  return ds;
}

struct RunSetup {
  tr::TrainerOptions o;
  double lr = 1e-2;
  const mt::data::Dataset* data = &data_a();
};

RunSetup base_run(const std::string& out_dir, int64_t steps) {
  RunSetup r;
  r.o.batch_size = kBatch;
  r.o.max_steps = steps;
  r.o.seed = 5;
  r.o.out_dir = out_dir;
  r.o.timing_warmup_steps = 0;
  return r;
}

tr::TrainSummary fit(const RunSetup& r) {
  auto model = small_model();
  tr::Trainer trainer(*model, tr::adamw(r.lr, 0.01), *r.data, nullptr, r.o);
  return trainer.fit();
}

// A loss that is NaN on the calls listed (1-based), the usual cross-entropy otherwise.
tr::LossFn nan_loss_on(std::vector<int> calls) {
  auto count = std::make_shared<int>(0);
  return [count, calls](const mt::Tensor& out, const mt::Tensor& target) {
    const mt::Tensor loss = tr::default_loss(out, target);
    ++*count;
    for (int c : calls)
      if (c == *count) return loss * std::nan("");
    return loss;
  };
}

std::string text_of(const std::string& path) { return mt::testing::read_bytes(path); }

}  // namespace

// ---- non-finite training ------------------------------------------------------------------------

TEST(NonFinite, ADivergingResumeStopsAndKeepsTheGoodFiles) {
  TempDir dir;
  RunSetup good = base_run(dir.path(), 4);
  good.o.lr_decay = tr::LrDecay::kConstant;
  fit(good);
  const std::string ck = text_of(dir.file("checkpoint.safetensors")), model = text_of(dir.file("model.safetensors"));
  const std::string summary = text_of(dir.file("summary.json"));

  // The same run resumed with an absurd learning rate (overridden on purpose).
  RunSetup bad = base_run(dir.path(), 12);
  bad.o.lr_decay = tr::LrDecay::kConstant;
  bad.o.resume_from = dir.file("checkpoint.safetensors");
  bad.o.resume_overrides = {"lr"};
  bad.lr = 1e30;
  try {
    fit(bad);
    ADD_FAILURE() << "a run with lr 1e30 did not stop";
  } catch (const tr::NonFiniteError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("training diverged at step "), std::string::npos) << msg;
    EXPECT_NE(msg.find("unchanged"), std::string::npos) << msg;
  }
  EXPECT_EQ(text_of(dir.file("checkpoint.safetensors")), ck);
  EXPECT_EQ(text_of(dir.file("model.safetensors")), model);
  EXPECT_EQ(text_of(dir.file("summary.json")), summary);
}

TEST(NonFinite, StopNamesTheStepTheLossAndTheGradient) {
  TempDir dir;
  RunSetup r = base_run(dir.path(), 6);
  r.o.loss_fn = nan_loss_on({3});
  const mt::testing::Caught c = mt::testing::catch_error([&] { fit(r); });
  ASSERT_TRUE(c.is_mt_error) << c.message;
  EXPECT_NE(c.message.find("diverged at step 3 (epoch 1, batch 3): the loss is nan"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("the first gradient with inf or NaN is that of '1.weight'"), std::string::npos)
      << c.message;
  // Nothing but the metrics of the two good steps was written.
  EXPECT_FALSE(std::filesystem::exists(dir.file("checkpoint.safetensors")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("model.safetensors")));
  const std::string metrics = text_of(dir.file("metrics.jsonl"));
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 2);
}

TEST(NonFinite, SkipLeavesTheParametersOfASkippedStepAlone) {
  // Steps 2 and 5 of 6 have a NaN loss: they are skipped (the weights do not move), counted, and the
  // run finishes with finite weights and its files.
  TempDir dir;
  RunSetup r = base_run(dir.path(), 6);
  r.o.on_nonfinite = tr::NonFinitePolicy::kSkip;
  r.o.loss_fn = nan_loss_on({2, 5});
  auto model = small_model();
  std::vector<float> w_prev = model->parameters()[0].to_vector<float>();
  int skipped_unchanged = 0, stepped_changed = 0;
  r.o.on_step = [&](const tr::StepInfo& i) {
    const std::vector<float> w = model->parameters()[0].to_vector<float>();
    (i.skipped ? skipped_unchanged : stepped_changed) += i.skipped ? w == w_prev : w != w_prev;
    w_prev = w;
  };
  tr::Trainer trainer(*model, tr::adamw(r.lr, 0.01), *r.data, nullptr, r.o);
  const tr::TrainSummary s = trainer.fit();
  EXPECT_EQ(s.skipped_steps, 2);
  EXPECT_EQ(skipped_unchanged, 2);
  EXPECT_EQ(stepped_changed, 4);
  EXPECT_EQ(s.steps, 6);
  for (const mt::Tensor& p : model->parameters())
    for (float v : p.to_vector<float>()) ASSERT_TRUE(std::isfinite(v));
  EXPECT_TRUE(std::filesystem::exists(dir.file("model.safetensors")));
}

TEST(NonFinite, ContinueNeverWritesNonFiniteWeights) {
  TempDir dir;
  RunSetup r = base_run(dir.path(), 4);
  r.o.on_nonfinite = tr::NonFinitePolicy::kContinue;
  r.o.loss_fn = nan_loss_on({2});  // NaN gradients are applied: every weight becomes NaN
  EXPECT_MT_ERROR(fit(r), "not writing checkpoint", "holds inf or NaN after step 4", "last good files are kept");
  EXPECT_FALSE(std::filesystem::exists(dir.file("checkpoint.safetensors")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("model.safetensors")));
}

TEST(NonFinite, AScaleAtTheFloorStopsAnFp16Run) {
  // Every loss is NaN: the GradScaler skips and halves 65536 -> 32768 -> 16384; at the floor the run stops.
  TempDir dir;
  RunSetup r = base_run(dir.path(), 20);
  r.o.precision = {.precision = tr::Precision::kFp16};
  r.o.scaler_floor = 16384;
  r.o.loss_fn = nan_loss_on({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  EXPECT_MT_ERROR(fit(r), "diverged at step 3", "loss scale 16384, at or below the floor of 16384",
                  "the first gradient with inf or NaN is that of");
}

TEST(NonFinite, PolicyNames) {
  for (auto p : {tr::NonFinitePolicy::kStop, tr::NonFinitePolicy::kSkip, tr::NonFinitePolicy::kContinue})
    EXPECT_EQ(tr::parse_nonfinite_policy(std::string(tr::to_string(p))), p);
  EXPECT_MT_ERROR(tr::parse_nonfinite_policy("ignore"), "\"ignore\"", "stop, skip, continue");
}

// ---- resume: exact or refused ---------------------------------------------------------------------

TEST(ResumeSettings, OtherDataOfTheSameSizeIsRefusedUnlessOverridden) {
  TempDir dir;
  fit(base_run(dir.path(), 3));
  RunSetup r = base_run(dir.path(), 3);
  r.o.resume_from = dir.file("checkpoint.safetensors");
  r.data = &data_b();
  EXPECT_NE(data_a().fingerprint(), data_b().fingerprint());
  EXPECT_MT_ERROR(fit(r), "was written by a run with other settings", "data = \"");
  r.o.resume_overrides = {"data"};
  EXPECT_EQ(fit(r).steps, 3);
}

TEST(ResumeSettings, OverridesAreCheckedByName) {
  TempDir dir;
  fit(base_run(dir.path(), 3));
  RunSetup r = base_run(dir.path(), 3);
  r.o.resume_from = dir.file("checkpoint.safetensors");
  r.o.resume_overrides = {"learning_rate"};
  EXPECT_MT_ERROR(fit(r), "resume_overrides names 'learning_rate', which is not a setting of this run");
  r.o.resume_overrides = {"precision"};
  EXPECT_MT_ERROR(fit(r), "'precision' cannot be overridden");
  // Every difference is listed, not only the first.
  r.o.resume_overrides = {};
  r.o.seed = 6;
  r.o.clip_grad_norm = 1.0;
  EXPECT_MT_ERROR(fit(r), "seed = 5 in the checkpoint, 6 in this run", "clip_grad_norm = null in the checkpoint, 1.0");
}

TEST(ResumeSettings, AnOverriddenLearningRateIsTheOneUsed) {
  TempDir dir;
  RunSetup first = base_run(dir.path(), 3);
  first.o.lr_decay = tr::LrDecay::kConstant;
  fit(first);
  RunSetup r = base_run(dir.path(), 5);
  r.o.lr_decay = tr::LrDecay::kConstant;
  r.o.resume_from = dir.file("checkpoint.safetensors");
  r.o.resume_overrides = {"lr"};
  r.lr = 0.5;
  std::vector<double> lrs;
  r.o.on_step = [&](const tr::StepInfo& i) { lrs.push_back(i.lr); };
  auto model = small_model();
  tr::Trainer trainer(*model, tr::adamw(r.lr, 0.01), *r.data, nullptr, r.o);
  trainer.load_checkpoint(r.o.resume_from);
  EXPECT_EQ(trainer.applied_overrides(), "lr = 0.01 in the checkpoint, 0.5 in this run");
  trainer.fit();
  EXPECT_EQ(lrs, (std::vector<double>{0.5, 0.5}));
}

// ---- crafted checkpoints ---------------------------------------------------------------------------

class CraftedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    RunSetup r = base_run(dir_.path(), 3);
    r.o.precision = {.precision = tr::Precision::kFp16};  // a scaler state to tamper with
    fit(r);
  }
  // Loads the good checkpoint, applies `edit` to its metadata, saves it as "bad.safetensors" and
  // returns the message of resuming from it (the test fails when the resume does not throw).
  std::string resume_error(const std::function<void(std::map<std::string, std::string>&)>& edit) {
    mt::io::Checkpoint ck = mt::io::load_checkpoint(dir_.file("checkpoint.safetensors"));
    edit(ck.metadata);
    mt::io::save_checkpoint(dir_.file("bad.safetensors"), ck);
    RunSetup r = base_run("", 6);
    r.o.precision = {.precision = tr::Precision::kFp16};
    r.o.resume_from = dir_.file("bad.safetensors");
    r.o.resume_overrides = {"total_steps"};
    const std::string msg = mt::testing::error_message([&] { fit(r); });
    EXPECT_LT(msg.size(), 2000u) << "an unbounded message: " << msg.substr(0, 300);
    return msg;
  }
  static void set_in(std::map<std::string, std::string>& meta, const char* entry, const char* key, json value) {
    json j = json::parse(meta.at(entry));
    j[key] = std::move(value);
    meta[entry] = j.dump();
  }
  TempDir dir_;
};

TEST_F(CraftedCheckpoint, TheUntouchedCheckpointResumes) {
  RunSetup r = base_run("", 6);
  r.o.precision = {.precision = tr::Precision::kFp16};
  r.o.resume_from = dir_.file("checkpoint.safetensors");
  r.o.resume_overrides = {"total_steps"};
  EXPECT_EQ(fit(r).steps, 6);
}

TEST_F(CraftedCheckpoint, DeeplyNestedJsonIsRefusedWithoutACrash) {
  // 500,000 nested arrays in a setting used to overflow the stack when the mismatch was printed.
  const std::string deep = std::string(500000, '[') + std::string(500000, ']');
  const std::string msg = resume_error([&](auto& meta) {
    std::string t = meta.at("trainer");
    t.insert(1, "\"precision\":" + deep + ",");
    meta["trainer"] = t;
  });
  EXPECT_NE(msg.find("nests deeper than 1 level"), std::string::npos) << msg;
}

TEST_F(CraftedCheckpoint, NumbersPastDoubleRangeAreRefused) {
  // nlohmann signals these with out_of_range, not parse_error; both must become an mt::Error.
  const std::string msg = resume_error([](auto& meta) {
    std::string t = meta.at("trainer");
    t.insert(1, "\"seed\":211111E1111111,");
    meta["trainer"] = t;
  });
  EXPECT_NE(msg.find("invalid JSON: number overflow parsing '211111E1111111'"), std::string::npos) << msg;
}

TEST_F(CraftedCheckpoint, DuplicateKeysAreRefused) {
  const std::string msg = resume_error([](auto& meta) {
    std::string t = meta.at("trainer");
    t.insert(1, "\"seed\":7,");
    meta["trainer"] = t;
  });
  EXPECT_NE(msg.find("duplicate key \"seed\""), std::string::npos) << msg;
}

TEST_F(CraftedCheckpoint, AnImpossiblePositionIsRefused) {
  EXPECT_NE(resume_error([](auto& meta) { meta["epoch"] = "1000000"; }).find("invalid position"), std::string::npos);
  EXPECT_NE(resume_error([](auto& meta) { meta["step"] = "-1"; }).find("invalid position"), std::string::npos);
  const std::string big = resume_error([](auto& meta) { meta["step"] = std::string(100000, '9'); });
  EXPECT_NE(big.find("'step'"), std::string::npos) << big;
}

TEST_F(CraftedCheckpoint, ScalerStateIsRangeChecked) {
  EXPECT_NE(resume_error([](auto& meta) { set_in(meta, "scaler", "scale", 0.0); }).find("scale must be a finite"),
            std::string::npos);
  EXPECT_NE(resume_error([](auto& meta) { set_in(meta, "scaler", "growth_interval", 1e300); })
                .find("growth_interval must be an integer"),
            std::string::npos);
  EXPECT_NE(resume_error([](auto& meta) { set_in(meta, "scaler", "backoff_factor", 1.5); }).find("backoff_factor"),
            std::string::npos);
}

TEST_F(CraftedCheckpoint, CountersAndOptimizerStepsAreRangeChecked) {
  EXPECT_NE(resume_error([](auto& meta) { set_in(meta, "trainer", "skipped_steps", 99); }).find("outside [0, 3]"),
            std::string::npos);
  EXPECT_NE(resume_error([](auto& meta) {
              json j = json::parse(meta.at("optim"));
              j["steps"][0] = 1000;
              meta["optim"] = j.dump();
            }).find("optimizer step of parameter 0 is 1000"),
            std::string::npos);
  EXPECT_NE(resume_error([](auto& meta) { meta["rng"] = "[1,2]"; }).find("set_rng_state"), std::string::npos);
}

// ---- output directories -------------------------------------------------------------------------------

TEST(OutDir, AnotherRunsDirectoryIsRefusedUnlessOverwritten) {
  TempDir dir;
  fit(base_run(dir.path(), 2));
  mt::testing::write_bytes(dir.file("notes.txt"), "mine");
  mt::testing::write_bytes(dir.file("checkpoint-99.safetensors"), "stale");
  const std::string before = text_of(dir.file("model.safetensors"));
  EXPECT_MT_ERROR(fit(base_run(dir.path(), 3)), "already holds files", "another run", "overwrite");
  EXPECT_EQ(text_of(dir.file("model.safetensors")), before);  // refused before anything was touched

  RunSetup again = base_run(dir.path(), 3);
  again.o.overwrite = true;
  fit(again);
  // The run files are this run's; the stale checkpoint is gone; the user's file stays.
  EXPECT_FALSE(std::filesystem::exists(dir.file("checkpoint-99.safetensors")));
  EXPECT_EQ(text_of(dir.file("notes.txt")), "mine");
  EXPECT_NE(text_of(dir.file("summary.json")).find("\"steps\": 3"), std::string::npos);
}

TEST(OutDir, AResumeInItsOwnDirectoryDropsTheAbandonedContinuation) {
  TempDir dir;
  RunSetup r = base_run(dir.path(), 6);
  r.o.checkpoint_every = 2;
  fit(r);  // checkpoint-2, -4, -6
  RunSetup resumed = r;
  resumed.o.resume_from = dir.file("checkpoint-2.safetensors");
  resumed.o.checkpoint_every = 3;
  fit(resumed);  // from step 2: -4 and -6 belonged to the first continuation; -3 and -6 are new
  EXPECT_TRUE(std::filesystem::exists(dir.file("checkpoint-2.safetensors")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("checkpoint-3.safetensors")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("checkpoint-4.safetensors")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("checkpoint-6.safetensors")));
  EXPECT_EQ(tr::find_latest_checkpoint(dir.path()), dir.file("checkpoint.safetensors"));
}

TEST(OutDir, TemporariesOfAKilledWriterAreRemoved) {
  TempDir dir;
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  const std::string orphan = ".checkpoint.safetensors.mixtrain-tmp." + std::to_string(pid) + ".00aa";
  mt::testing::write_bytes(dir.file(orphan), "half a checkpoint");
  fit(base_run(dir.path(), 2));
  EXPECT_FALSE(std::filesystem::exists(dir.file(orphan)));
}

TEST(OutDir, AFullDiskDuringTheRunIsAnErrorAndKeepsTheLastCheckpoint) {
  TempDir dir;
  RunSetup r = base_run(dir.path(), 4);
  fit(r);
  const std::string ck = text_of(dir.file("checkpoint.safetensors"));
  RunSetup more = base_run(dir.path(), 8);
  more.o.resume_from = dir.file("checkpoint.safetensors");
  more.o.resume_overrides = {"total_steps"};
  {
    mt::testing::FileSizeLimit limit(static_cast<rlim_t>(ck.size() / 2));
    ASSERT_TRUE(limit.ok());
    EXPECT_MT_ERROR(fit(more), "cannot write", "checkpoint.safetensors", "File too large", "unchanged");
  }
  EXPECT_EQ(text_of(dir.file("checkpoint.safetensors")), ck);
  for (const std::string& name : dir.entries()) EXPECT_FALSE(mt::io::is_temp_file_name(name)) << name;
}

TEST(OutDir, KeepCheckpointsKeepsTheNewest) {
  TempDir dir;
  RunSetup r = base_run(dir.path(), 7);
  r.o.checkpoint_every = 1;
  r.o.keep_checkpoints = 2;
  fit(r);
  std::vector<std::string> periodic;
  for (const std::string& name : dir.entries())
    if (name.rfind("checkpoint-", 0) == 0) periodic.push_back(name);
  EXPECT_EQ(periodic, (std::vector<std::string>{"checkpoint-6.safetensors", "checkpoint-7.safetensors"}));
}

TEST(FindLatestCheckpoint, PicksTheHighestStep) {
  TempDir dir;
  EXPECT_EQ(tr::find_latest_checkpoint(dir.path()), "");
  EXPECT_EQ(tr::find_latest_checkpoint(dir.file("missing")), "");
  RunSetup r = base_run(dir.path(), 5);
  r.o.checkpoint_every = 2;
  r.o.on_step = [&](const tr::StepInfo& i) {
    if (i.step == 5) EXPECT_EQ(tr::find_latest_checkpoint(dir.path()), dir.file("checkpoint-4.safetensors"));
  };
  fit(r);
  EXPECT_EQ(tr::find_latest_checkpoint(dir.path()), dir.file("checkpoint.safetensors"));
}

// ---- FP8 scaling state in checkpoints ----------------------------------------------------------------

// Every FP8 layer's scales and histories travel in the checkpoint (fp8.<layer>.<role>.*); a resumed
// run ends with the parameters of the uninterrupted one, and crafted FP8 tensors are refused.
TEST(Fp8Checkpoint, ResumesExactlyAndRefusesCraftedState) {
  TempDir dir;
  auto fp8_run = [&](const std::string& out, int64_t steps) {
    RunSetup r = base_run(out, steps);
    r.o.precision = {.precision = tr::Precision::kFp8, .fp8 = {.amax_history_len = 2}};
    r.o.lr_decay = tr::LrDecay::kConstant;
    return r;
  };
  auto train = [](const RunSetup& r) {
    auto model = small_model();
    tr::Trainer trainer(*model, tr::adamw(r.lr, 0.01), *r.data, nullptr, r.o);
    trainer.fit();
    return model->parameters()[0].to_vector<float>();
  };
  const std::vector<float> straight = train(fp8_run("", 6));
  train(fp8_run(dir.path(), 3));
  const mt::io::Checkpoint good = mt::io::load_checkpoint(dir.file("checkpoint.safetensors"));
  for (const char* key : {"fp8.1.input.scale", "fp8.1.weight.amax_history", "fp8.3.grad_output.scale"})
    EXPECT_EQ(good.tensors.count(key), 1u) << key;
  RunSetup resumed = fp8_run("", 6);
  resumed.o.resume_from = dir.file("checkpoint.safetensors");
  EXPECT_EQ(train(resumed), straight);

  auto resume_error = [&](const std::function<void(mt::io::Checkpoint&)>& edit) {
    mt::io::Checkpoint ck = good;
    edit(ck);
    mt::io::save_checkpoint(dir.file("bad.safetensors"), ck);
    RunSetup r = fp8_run("", 6);
    r.o.resume_from = dir.file("bad.safetensors");
    return mt::testing::error_message([&] { train(r); });
  };
  auto has = [](const std::string& msg, const char* part) { return msg.find(part) != std::string::npos; };
  std::string msg = resume_error([](auto& ck) { ck.tensors["fp8.1.input.scale"] = mt::full({1}, std::nan("")); });
  EXPECT_TRUE(has(msg, "extra state of '1': FP8 state (fp8.1.input)") && has(msg, "finite and > 0")) << msg;
  msg = resume_error([](auto& ck) { ck.tensors["fp8.9.input.scale"] = mt::ones({1}); });
  EXPECT_TRUE(has(msg, "unexpected extra-state tensor \"fp8.9.input.scale\"")) << msg;
  msg = resume_error([](auto& ck) { ck.tensors["fp8.1.input.bias"] = mt::ones({1}); });
  EXPECT_TRUE(has(msg, "unexpected FP8 tensor \"fp8.1.input.bias\"")) << msg;
  msg = resume_error([](auto& ck) { ck.tensors["fp8.1.weight.amax_history"] = mt::ones({2}, {.dtype = mt::kFloat64}); });
  EXPECT_TRUE(has(msg, "must be float32")) << msg;
  msg = resume_error([](auto& ck) { ck.tensors["fp8.1.weight.amax_history"] = mt::full({2}, -1.0); });
  EXPECT_TRUE(has(msg, "amax must be finite and >= 0")) << msg;
  msg = resume_error([](auto& ck) { ck.tensors.erase("fp8.3.weight.scale"); });
  EXPECT_TRUE(has(msg, "'fp8.3.weight.scale' is missing")) << msg;
}
