// Trainer with a training-batch transform: the augmentation changes training, never evaluation,
// and a resumed run still equals the uninterrupted one bit for bit.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/file_helpers.h"
#include "mixtrain/data/transforms.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/nn/modules.h"
#include "mixtrain/train/trainer.h"

namespace mt = mixtrain;
namespace tr = mixtrain::train;
using mt::testing::TempDir;

namespace {

const mt::data::SyntheticDataset& images() {
  static const mt::data::SyntheticDataset ds(80, {1, 4, 4}, 3, /*seed=*/6);  // 5 batches of 16 per epoch
  return ds;
}

struct Result {
  std::vector<std::vector<float>> params;
  tr::TrainSummary summary;
};

Result train(bool flip, int64_t steps, const std::string& out_dir = "", const std::string& resume = "") {
  mt::manual_seed(resume.empty() ? 1 : 77);  // a resumed run must take everything from the checkpoint
  auto model = std::make_shared<mt::nn::Sequential>(mt::nn::Flatten(), mt::nn::Linear(16, 8), mt::nn::ReLU(),
                                                    mt::nn::Linear(8, 3));
  tr::TrainerOptions o;
  o.batch_size = 16;
  o.max_steps = steps;
  o.seed = 2;
  o.out_dir = out_dir;
  o.resume_from = resume;
  o.timing_warmup_steps = 0;
  o.precision = {.precision = tr::Precision::kBf16};
  if (flip) {
    o.train_transform = mt::data::random_horizontal_flip(o.seed);
    o.augment_name = "flip";
  }
  tr::Trainer trainer(*model, tr::adamw(1e-2, 0.0), images(), &images(), o);
  Result r;
  r.summary = trainer.fit();
  for (const auto& p : model->parameters()) r.params.push_back(p.to_vector<float>());
  return r;
}

}  // namespace

TEST(TrainerAugment, FlipChangesTrainingAndResumesExactly) {
  TempDir dir;
  const Result plain = train(false, 8);
  const Result straight = train(true, 8);
  EXPECT_NE(plain.params, straight.params) << "the transform did not reach the training batches";
  EXPECT_EQ(straight.summary.augment, "flip");
  EXPECT_EQ(plain.summary.augment, "none");

  train(true, 3, dir.file("split"));  // 3 steps, checkpoint; resume to 8 (across the epoch boundary at 5)
  const Result resumed = train(true, 8, dir.file("split"), dir.file("split") + "/checkpoint.safetensors");
  EXPECT_EQ(resumed.params, straight.params);
  EXPECT_EQ(resumed.summary.final_loss, straight.summary.final_loss);
  EXPECT_EQ(resumed.summary.test_accuracy, straight.summary.test_accuracy);
}
