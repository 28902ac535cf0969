// Placement: every model of the CLI's table trains on the checked device (mixtrain/device.h) through
// the Trainer the way a user's program does it -- model built on the CPU, model.to(device), the
// default device left on the CPU -- in every precision, with the non-finite origin finder and the
// numerics monitor on and a checkpoint + resume midway, and ends with the CPU run's bits. A tensor
// that the library creates without a device lands on the CPU, where the checked device's kernel guard
// (or the op's own device check) refuses it. The same runs through the real CLI are in
// tests/cli/placement.cmake; the host waits a step costs are counted here.
//
// MIXTRAIN_PLACEMENT_DEVICE=cuda runs the same on a GPU (scripts/gpu-check.sh): there the kernels are
// not the CPU's, so the runs are compared within tolerances (below) instead of bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "cli_common.h"
#include "kernels/fp8.h"
#include "data/file_helpers.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/train/trainer.h"
#include "models.h"

namespace mt = mixtrain;
namespace tr = mixtrain::train;
namespace cli = mixtrain::cli;
namespace fs = std::filesystem;
using mt::testing::TempDir;

namespace {

const mt::Device kHost{};

// The device under test: the checked device unless MIXTRAIN_PLACEMENT_DEVICE names another.
mt::Device placement_device() {
  const char* env = std::getenv("MIXTRAIN_PLACEMENT_DEVICE");
  return mt::parse_device(env != nullptr && *env != '\0' ? env : "checked");
}

// Tokens per sequence of the language models here (their context is 128 or more).
constexpr int64_t kTokens = 32;

// gpt-small's width and heads with one block and a short context: its kernels' shapes (768 wide, 12
// heads of 64) at a size the CPU trains in a fraction of a second a step.
mt::nn::GPTConfig reduced_gpt_small() {
  mt::nn::GPTConfig c = cli::gpt_config("gpt-small");
  c.num_layers = 1;
  c.context = kTokens;
  return c;
}

// GPT-2's architecture (tied head, GELU tanh, dropout on) at a size the CPU trains in milliseconds; its
// vocabulary holds the byte tokens of the text below.
mt::nn::GPT2Config reduced_gpt2() {
  return {.vocab_size = 300, .n_positions = kTokens, .n_embd = 64, .n_layer = 2, .n_head = 4};
}

std::shared_ptr<mt::nn::Module> build(const std::string& name) {
  if (name == "gpt2") return cli::make_gpt2(reduced_gpt2(), /*seed=*/3);
  return name == "gpt-small" ? cli::make_gpt(reduced_gpt_small(), /*seed=*/3) : cli::make_model(name, /*seed=*/3);
}

double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

bool is_language_model(const std::string& name) { return name == "gpt" || name == "gpt-small" || name == "gpt2"; }

const mt::data::Dataset& data_for(const std::string& name) {
  static const mt::data::SyntheticDataset images(64, {1, 28, 28}, 10, /*seed=*/7);
  static const mt::data::TextDataset text = mt::data::TextDataset::from_string(
      cli::random_text(40 * kTokens, /*seed=*/7), kTokens, {.part = mt::data::TextPart::kTrain, .stride = kTokens});
  return is_language_model(name) ? static_cast<const mt::data::Dataset&>(text) : images;
}

std::string bytes_of(const mt::Tensor& t) {
  const mt::Tensor c = t.to(kHost).contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

struct RunResult {
  std::vector<std::pair<std::string, std::string>> tensors;  // model and optimizer state, as bytes
  std::vector<std::vector<double>> values;                    // the same tensors' values
  std::vector<double> losses;
  double scale = 0;
  int64_t skipped = 0;
};

struct Spec {
  std::string model;
  tr::Precision precision;
  mt::Device device;
  int64_t steps = 4;
  std::string out_dir;      // the numerics report goes here, and the run's files when checkpoint_every > 0
  int64_t checkpoint_every = 0;
  std::string resume_from;  // a checkpoint of an earlier run
};

RunResult train(const Spec& spec) {
  EXPECT_EQ(mt::default_device(), kHost) << "the placement runs leave the default device alone";
  auto model = build(spec.model);
  model->to(spec.device);
  tr::TrainerOptions o;
  o.precision = {.precision = spec.precision};
  o.batch_size = is_language_model(spec.model) ? 4 : 8;
  o.max_steps = spec.steps;
  o.seed = 5;
  o.timing_warmup_steps = 0;
  o.find_nonfinite_origin = true;
  // Samples at steps 2 and 4: in each of the runs below, also the resumed one.
  o.numerics_report_dir = spec.out_dir + "/numerics";
  o.numerics_every = 2;
  o.out_dir = spec.checkpoint_every > 0 ? spec.out_dir : "";  // checkpoints only where a resume reads them
  o.checkpoint_every = spec.checkpoint_every;
  o.resume_from = spec.resume_from;
  o.model_name = spec.model;
  RunResult r;
  o.on_step = [&r](const tr::StepInfo& i) { r.losses.push_back(i.loss); };
  tr::Trainer trainer(*model, tr::adamw(1e-3, 0.01), data_for(spec.model), nullptr, o);
  const tr::TrainSummary s = trainer.fit();
  for (const mt::Tensor& p : model->parameters()) EXPECT_EQ(p.device(), spec.device);
  auto keep = [&r](const std::string& name, const mt::Tensor& t) {
    r.tensors.emplace_back(name, bytes_of(t));
    r.values.push_back(t.is_floating_point() ? t.to(mt::kFloat64).to_vector<double>() : std::vector<double>{});
  };
  for (const auto& [name, t] : model->state_dict()) keep("model." + name, t);
  const mt::optim::OptimizerStateDict osd = trainer.optimizer().state_dict();
  for (size_t i = 0; i < osd.state.size(); ++i)
    for (const auto& [key, t] : osd.state[i].named_tensors()) keep("optim." + std::to_string(i) + "." + key, t);
  r.scale = s.final_scale;
  r.skipped = s.skipped_steps;
  EXPECT_TRUE(fs::exists(o.numerics_report_dir + "/report.md")) << spec.model;

  return r;
}

struct Case {
  std::string model;
  tr::Precision precision;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.model << " " << tr::to_string(c.precision); }

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = info.param.model + "_" + std::string(tr::to_string(info.param.precision));
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
}

class Placement : public ::testing::TestWithParam<Case> {};

// Two steps on the device, a checkpoint, a resume into a fresh model and Trainer on the device, two
// more steps: the CPU's four uninterrupted steps, bit for bit on the checked device.
TEST_P(Placement, TrainsOnTheCheckedDeviceToTheCpusBits) {
  const Case& c = GetParam();
  const mt::Device dev = placement_device();
  mt::kernels::register_builtin_kernels();
  if (c.precision == tr::Precision::kFp8 && !mt::kernels::fp8_quantize_table.has(dev.type, mt::kFloat32))
    GTEST_SKIP() << "FP8 is emulated on the CPU and the checked device only: " << dev << " has no fp8 kernels";
  TempDir cpu_dir, dev_dir;
  const RunResult on_cpu = train({.model = c.model, .precision = c.precision, .device = kHost, .out_dir = cpu_dir.path()});
  train({.model = c.model,
         .precision = c.precision,
         .device = dev,
         .steps = 2,
         .out_dir = dev_dir.path(),
         .checkpoint_every = 2});
  const std::string checkpoint = dev_dir.path() + "/checkpoint-2.safetensors";
  ASSERT_TRUE(fs::exists(checkpoint));
  TempDir resumed_dir;
  const RunResult dev_run = train({.model = c.model,
                             .precision = c.precision,
                             .device = dev,
                             .out_dir = resumed_dir.path(),
                             .resume_from = checkpoint});
  ASSERT_EQ(on_cpu.tensors.size(), dev_run.tensors.size());
  ASSERT_EQ(on_cpu.losses.size(), 4u);
  ASSERT_EQ(dev_run.losses.size(), 2u);
  for (double l : on_cpu.losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_EQ(on_cpu.scale, dev_run.scale);
  if (dev.type == mt::kChecked) {
    for (size_t i = 0; i < on_cpu.tensors.size(); ++i) {
      EXPECT_EQ(on_cpu.tensors[i].first, dev_run.tensors[i].first);
      EXPECT_TRUE(on_cpu.tensors[i].second == dev_run.tensors[i].second) << on_cpu.tensors[i].first << " differs";
    }
    EXPECT_EQ(on_cpu.losses[2], dev_run.losses[0]);
    EXPECT_EQ(on_cpu.losses[3], dev_run.losses[1]);
    return;
  }
  // Another device's kernels sum in other orders. Losses: within 1% (fp32) or 5% (16-bit and fp8
  // activations) of the cpu's. Parameters: AdamW moves an element by at most about 3.2 x lr a step
  // (the bias-corrected m / sqrt(v) bound at betas 0.9 / 0.999), so two runs whose gradients differ in
  // rounding stay within 4 steps x 2 x 3.2e-3 of each other even where a tiny gradient's sign differs.
  const double loss_rtol = c.precision == tr::Precision::kFp32 ? 1e-2 : 5e-2;
  EXPECT_NEAR(on_cpu.losses[2], dev_run.losses[0], loss_rtol * std::fabs(on_cpu.losses[2]));
  EXPECT_NEAR(on_cpu.losses[3], dev_run.losses[1], loss_rtol * std::fabs(on_cpu.losses[3]));
  for (size_t i = 0; i < on_cpu.tensors.size(); ++i) {
    const std::string& name = on_cpu.tensors[i].first;
    if (name.rfind("model.", 0) != 0) continue;  // optimizer moments follow the gradients' rounding
    EXPECT_LE(max_abs_difference(on_cpu.values[i], dev_run.values[i]), 4 * 2 * 3.2e-3) << name;
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const std::string& model : cli::model_names())
    for (tr::Precision p : {tr::Precision::kFp32, tr::Precision::kBf16, tr::Precision::kFp16, tr::Precision::kFp8})
      cases.push_back({model, p});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(EveryModelAndPrecision, Placement, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace

namespace {

// What one steady-state step waits for on the checked device (SyncCounts), which is what it would wait
// for on a GPU. Exact counts, each with its reason (docs/notes/backends.md "Host waits per step"):
//   to_host        1: the loss, for the log and the non-finite policy; + 1 with the GradScaler: the
//                  scale after update(), read once per change (the log and the collapse check)
//   from_host      2: the batch (inputs and targets)
//   kernel_results 1: the non-finite check of the gradients (PyTorch's GradScaler's one sync; without
//                  the scaler the Trainer's gate runs the same check); + 1: the targets' index check
//                  (out-of-range targets are an error, not a device fault; it also counts the ignored
//                  targets, cross-entropy's denominator); + 1 per embedding (gpt: tokens and
//                  positions), its index check
// FP8 is left out: its delayed scaling reads every quantized tensor's amax (CPU emulation only).
struct ExpectedWaits {
  std::string model;
  tr::Precision precision;
  int64_t to_host, from_host, kernel_results;
};

TEST(PlacementSyncs, HostWaitsPerSteadyStepAreTheDocumentedOnes) {
  const mt::Device dev = placement_device();
  using P = tr::Precision;
  const std::vector<ExpectedWaits> cases = {
      {"mlp", P::kFp32, 1, 2, 2}, {"mlp", P::kBf16, 1, 2, 2}, {"mlp", P::kFp16, 2, 2, 2},
      {"cnn", P::kFp32, 1, 2, 2}, {"cnn", P::kFp16, 2, 2, 2},
      {"gpt", P::kFp32, 1, 2, 4}, {"gpt", P::kBf16, 1, 2, 4}, {"gpt", P::kFp16, 2, 2, 4}};
  for (const ExpectedWaits& c : cases) {
    SCOPED_TRACE(c.model + " " + std::string(tr::to_string(c.precision)));
    auto m = build(c.model);
    m->to(dev);
    tr::TrainerOptions o;
    o.precision = {.precision = c.precision};
    o.batch_size = is_language_model(c.model) ? 4 : 8;
    o.max_steps = 5;
    mt::SyncCounts at2, at5;
    o.on_step = [&](const tr::StepInfo& i) {
      if (i.step == 2) at2 = mt::sync_counts(dev);
      if (i.step == 5) at5 = mt::sync_counts(dev);
    };
    tr::Trainer trainer(*m, tr::adamw(1e-3, 0.01), data_for(c.model), nullptr, o);
    trainer.fit();
    EXPECT_EQ(at5.to_host - at2.to_host, 3 * c.to_host);
    EXPECT_EQ(at5.from_host - at2.from_host, 3 * c.from_host);
    EXPECT_EQ(at5.kernel_results - at2.kernel_results, 3 * c.kernel_results);
    EXPECT_EQ(at5.synchronize - at2.synchronize, 0);
  }
}

}  // namespace
