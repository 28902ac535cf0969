// The Trainer's TensorBoard event file: the numbers of metrics.jsonl under TensorBoard tags, one
// file per fit(), a resume that tells TensorBoard to drop the abandoned steps, --overwrite removing
// another run's files, and none with tensorboard = false. (bench/tensorboard/check_events.py checks
// the same files with TensorBoard's own reader.)
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/file_helpers.h"
#include "mixtrain/io/event_file.h"
#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;
namespace tr = mixtrain::train;
namespace fs = std::filesystem;
using mt::testing::TempDir;
using json = nlohmann::json;

namespace {

const mt::data::SyntheticDataset& train_set() {
  static const mt::data::SyntheticDataset ds(96, {1, 4, 4}, 4, /*seed=*/6);
  return ds;
}
const mt::data::SyntheticDataset& eval_set() {
  static const mt::data::SyntheticDataset ds(16, {1, 4, 4}, 4, /*seed=*/7);
  return ds;
}

tr::TrainSummary fit(const std::string& out, int64_t steps, const std::string& resume = "", bool tensorboard = true,
                     bool overwrite = false) {
  mt::manual_seed(9);
  mt::nn::Sequential model(mt::nn::Flatten(), mt::nn::Linear(16, 8), mt::nn::ReLU(), mt::nn::Linear(8, 4));
  tr::TrainerOptions o;
  o.precision = {.precision = tr::Precision::kFp16};
  o.batch_size = 16;
  o.max_steps = steps;
  o.lr_decay = tr::LrDecay::kConstant;
  o.clip_grad_norm = 1.0;
  o.eval_every = 3;
  o.checkpoint_every = 3;
  o.out_dir = out;
  o.resume_from = resume;
  o.tensorboard = tensorboard;
  o.overwrite = overwrite;
  tr::Trainer trainer(model, tr::adamw(1e-2), train_set(), &eval_set(), o);
  return trainer.fit();
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().starts_with("events.out.tfevents.")) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// (tag, step) -> value, from metrics.jsonl with TensorBoard's tag for each key, rounded to float.
std::map<std::pair<std::string, int64_t>, float> expected_scalars(const std::string& dir) {
  const std::map<std::string, std::string> tags = {
      {"loss", "train/loss"},           {"lr", "train/lr"},
      {"scale", "train/loss_scale"},    {"grad_norm", "train/grad_norm"},
      {"skipped_total", "train/skipped_steps"}, {"step_ms", "train/step_ms"},
      {"samples_per_s", "train/samples_per_s"}, {"peak_mib", "train/peak_mib"},
      {"eval_loss", "eval/loss"},       {"eval_accuracy", "eval/accuracy"}};
  std::map<std::pair<std::string, int64_t>, float> out;
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    for (const auto& [key, value] : j.items()) {
      if (key == "step" || key == "epoch" || key == "skipped") continue;
      EXPECT_TRUE(tags.contains(key)) << "metrics.jsonl key '" << key << "' has no TensorBoard tag in this test";
      if (tags.contains(key)) out[{tags.at(key), j["step"].get<int64_t>()}] = static_cast<float>(value.get<double>());
    }
  }
  return out;
}

}  // namespace

TEST(TrainerTensorBoard, TheEventFileHoldsMetricsJsonlsNumbers) {
  TempDir dir;
  fit(dir.path(), 7);
  const std::vector<std::string> files = event_files(dir.path());
  ASSERT_EQ(files.size(), 1u);
  const mt::io::EventFileContents c = mt::io::read_event_file(files[0]);
  EXPECT_EQ(c.file_version, mt::io::kEventFileVersion);
  EXPECT_TRUE(c.session_starts.empty());
  std::map<std::pair<std::string, int64_t>, float> got;
  for (const mt::io::ScalarEvent& e : c.scalars) {
    EXPECT_FALSE(got.contains({e.tag, e.step})) << e.tag << " logged twice at step " << e.step;
    got[{e.tag, e.step}] = e.value;
  }
  const auto want = expected_scalars(dir.path());
  EXPECT_EQ(got, want);
  // Every kind of scalar is there: training, the clipped norm, the evaluations.
  EXPECT_EQ(want.size(), 7u * 8 + 3 * 2);  // 8 per step, eval loss and accuracy at steps 3, 6, 7
  EXPECT_TRUE(got.contains({"train/grad_norm", 7}));
  EXPECT_TRUE(got.contains({"eval/accuracy", 6}));
}

TEST(TrainerTensorBoard, AResumedRunDropsTheAbandonedStepsAndOverwriteRemovesTheFiles) {
  TempDir dir;
  fit(dir.path(), 7);  // checkpoints at 3 and 6
  // Resumed from step 3 in the same directory: a second file, which starts a session at step 4.
  fit(dir.path(), 7, dir.file("checkpoint-3.safetensors"));
  std::vector<std::string> files = event_files(dir.path());
  ASSERT_EQ(files.size(), 2u);
  std::vector<int64_t> starts;
  for (const std::string& f : files)
    for (const int64_t s : mt::io::read_event_file(f).session_starts) starts.push_back(s);
  EXPECT_EQ(starts, std::vector<int64_t>{4});
  // What TensorBoard shows: each file's events, the earlier ones past a session start dropped.
  std::map<std::pair<std::string, int64_t>, float> shown;
  for (const std::string& f : files) {
    const mt::io::EventFileContents c = mt::io::read_event_file(f);
    for (const int64_t s : c.session_starts) std::erase_if(shown, [s](const auto& kv) { return kv.first.second >= s; });
    for (const mt::io::ScalarEvent& e : c.scalars) shown[{e.tag, e.step}] = e.value;
  }
  EXPECT_EQ(shown, expected_scalars(dir.path()));  // metrics.jsonl was truncated the same way
  // --overwrite: a new run replaces both files with its own.
  fit(dir.path(), 2, "", true, /*overwrite=*/true);
  files = event_files(dir.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(mt::io::read_event_file(files[0]).scalars.back().step, 2);
}

TEST(TrainerTensorBoard, OffWritesNoEventFile) {
  TempDir dir;
  fit(dir.path(), 2, "", /*tensorboard=*/false);
  EXPECT_TRUE(event_files(dir.path()).empty());
  EXPECT_TRUE(fs::exists(dir.file("metrics.jsonl")));
}
