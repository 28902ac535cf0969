// TrainerOptions::clip_grad_norm: clipping after the GradScaler unscales (PyTorch's unscale_,
// clip_grad_norm_, step), and the norm before clipping reported per step (StepInfo::grad_norm,
// metrics.jsonl "grad_norm").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/file_helpers.h"
#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;
namespace tr = mixtrain::train;

namespace {

std::shared_ptr<mt::nn::Sequential> model_for_clipping() {
  mt::manual_seed(11);
  return std::make_shared<mt::nn::Sequential>(mt::nn::Flatten(), mt::nn::Linear(16, 32), mt::nn::ReLU(),
                                              mt::nn::Linear(32, 4));
}

const mt::data::SyntheticDataset& data() {
  static const mt::data::SyntheticDataset ds(64, {1, 4, 4}, 4, /*seed=*/3);
  return ds;
}

// The 2-norm of every gradient of `model`, in double.
double grad_norm(const mt::nn::Module& model) {
  double sum = 0;
  for (const mt::Tensor& p : model.parameters())
    if (p.grad().defined())
      for (float g : p.grad().to(mt::kCPU).to(mt::kFloat32).contiguous().to_vector<float>()) sum += double(g) * g;
  return std::sqrt(sum);
}

struct Seen {
  std::vector<double> reported;     // StepInfo::grad_norm
  std::vector<double> after_step;   // the gradients' norm when on_step runs (after clipping)
};

Seen run(tr::Precision precision, double max_norm, const std::string& out_dir = "") {
  auto model = model_for_clipping();
  tr::TrainerOptions o;
  o.precision = {.precision = precision};
  o.batch_size = 16;
  o.max_steps = 6;
  o.seed = 5;
  o.out_dir = out_dir;
  o.clip_grad_norm = max_norm;
  Seen seen;
  o.on_step = [&](const tr::StepInfo& i) {
    ASSERT_TRUE(i.grad_norm.has_value()) << "step " << i.step;
    seen.reported.push_back(*i.grad_norm);
    seen.after_step.push_back(grad_norm(*model));
  };
  tr::Trainer trainer(*model, tr::adamw(1e-2, 0.01), data(), nullptr, o);
  trainer.fit();
  return seen;
}

}  // namespace

TEST(TrainerGradClip, ReportsTheNormBeforeClippingAndClipsToTheLimit) {
  for (tr::Precision p : {tr::Precision::kFp32, tr::Precision::kFp16}) {  // fp16: with the GradScaler
    SCOPED_TRACE(std::string(tr::to_string(p)));
    // A limit far above the norms: nothing is clipped, and the reported norm is the gradients' own
    // (unscaled: the scaler's 65536 does not appear in it).
    const Seen loose = run(p, 1e9);
    ASSERT_EQ(loose.reported.size(), 6u);
    for (size_t s = 0; s < loose.reported.size(); ++s) {
      EXPECT_TRUE(std::isfinite(loose.reported[s]) && loose.reported[s] > 0) << loose.reported[s];
      EXPECT_NEAR(loose.reported[s], loose.after_step[s], 1e-5 * loose.after_step[s]) << "step " << s + 1;
    }
    // A limit below every norm: the gradients the optimizer used have the limit's norm, the report
    // is the larger norm they had before.
    const double limit = 0.5 * *std::min_element(loose.reported.begin(), loose.reported.end());
    const Seen tight = run(p, limit);
    EXPECT_NEAR(tight.reported[0], loose.reported[0], 1e-6 * loose.reported[0]) << "the same first step";
    for (size_t s = 0; s < tight.reported.size(); ++s) {
      EXPECT_GT(tight.reported[s], limit * 1.01) << "step " << s + 1;
      EXPECT_NEAR(tight.after_step[s], limit, 1e-3 * limit) << "step " << s + 1;
    }
  }
}

TEST(TrainerGradClip, MetricsCarryTheNormOnlyWithClipping) {
  mt::testing::TempDir dir;
  const Seen seen = run(tr::Precision::kFp32, 1e9, dir.path());
  std::ifstream f(dir.file("metrics.jsonl"));
  std::string line;
  size_t n = 0;
  while (std::getline(f, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    ASSERT_TRUE(j.contains("grad_norm")) << line;
    EXPECT_DOUBLE_EQ(j["grad_norm"].get<double>(), seen.reported[n]);
    ++n;
  }
  EXPECT_EQ(n, 6u);
  // Without clipping no norm is computed, and none is written.
  auto model = model_for_clipping();
  mt::testing::TempDir plain;
  tr::TrainerOptions o;
  o.batch_size = 16;
  o.max_steps = 2;
  o.out_dir = plain.path();
  tr::Trainer trainer(*model, tr::adamw(1e-2, 0.01), data(), nullptr, o);
  trainer.fit();
  std::ifstream g(plain.file("metrics.jsonl"));
  while (std::getline(g, line)) EXPECT_EQ(line.find("grad_norm"), std::string::npos) << line;
}
