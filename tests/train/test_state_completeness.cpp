// Resume is exact or refused, tensor by tensor: a checkpoint (plain or ZeRO-1 shards) with any
// single state tensor removed is refused naming it, never resumed from fresh moments, scales or
// compensations. And the optimizer's own load_state_dict refuses incomplete or surplus state.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "data/file_helpers.h"
#include "mixtrain/io/checkpoint.h"
#include "mixtrain/io/safetensors.h"
#include "mixtrain/mixtrain.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
namespace tr = mixtrain::train;
using mt::testing::TempDir;

namespace {

std::shared_ptr<mt::nn::Sequential> small_model() {
  mt::manual_seed(1);
  return std::make_shared<mt::nn::Sequential>(mt::nn::Flatten(), mt::nn::Linear(16, 32), mt::nn::ReLU(),
                                              mt::nn::Linear(32, 4));
}

const mt::data::SyntheticDataset& data() {
  static const mt::data::SyntheticDataset ds(64, {1, 4, 4}, 4, /*seed=*/3);
  return ds;
}

tr::TrainerOptions options(const std::string& out_dir, int64_t steps, const tr::PrecisionConfig& precision,
                           int zero_stage) {
  tr::TrainerOptions o;
  o.batch_size = 16;
  o.max_steps = steps;
  o.seed = 5;
  o.out_dir = out_dir;
  o.timing_warmup_steps = 0;
  o.lr_decay = tr::LrDecay::kConstant;
  o.precision = precision;
  o.zero_stage = zero_stage;
  return o;
}

void train(const tr::TrainerOptions& o) {
  auto model = small_model();
  tr::Trainer trainer(*model, tr::adamw(1e-2, 0.01), data(), nullptr, o);
  trainer.fit();
}

// Rewrites safetensors file `path` into `out` without tensor `name` (offsets recomputed: a valid file).
void copy_without(const std::string& path, const std::string& out, const std::string& name) {
  mt::io::SafetensorsFile f = mt::io::load_safetensors(path);
  ASSERT_EQ(f.tensors.erase(name), 1u) << name;
  mt::io::save_safetensors(out, f.tensors, f.metadata);
}

struct Case {
  const char* label;
  tr::PrecisionConfig precision;
  int zero_stage = 0;
};

// Trains 2 steps into a directory, then for every tensor of the checkpoint (or of its ZeRO shard)
// resumes from a copy without it: each resume must be refused, naming the tensor. The untouched
// checkpoint must resume (the test would pass vacuously if every resume failed).
void expect_every_tensor_required(const Case& c) {
  SCOPED_TRACE(c.label);
  TempDir dir;
  const std::string run = dir.file("run");
  train(options(run, 2, c.precision, c.zero_stage));
  const std::string ck = run + "/checkpoint.safetensors";
  const std::string shard = run + "/checkpoint.zero-0-of-1.safetensors";
  ASSERT_EQ(std::filesystem::exists(shard), c.zero_stage == 1);

  auto resume = [&](const std::string& from) {
    tr::TrainerOptions o = options("", 3, c.precision, c.zero_stage);
    o.resume_from = from;
    train(o);
  };
  EXPECT_EQ(mt::testing::catch_error([&] { resume(ck); }).message, "no exception");

  const std::string file = c.zero_stage == 1 ? shard : ck;
  const mt::io::SafetensorsHeader h = mt::io::read_safetensors_header(file);
  int state_tensors = 0;
  for (const mt::io::SafetensorsEntry& e : h.tensors) {
    SCOPED_TRACE(e.name);
    const std::string bad = dir.file("bad");
    std::filesystem::remove_all(bad);
    std::filesystem::create_directories(bad);
    const std::string bad_ck = bad + "/checkpoint.safetensors";
    if (c.zero_stage == 1) {
      std::filesystem::copy_file(ck, bad_ck);
      copy_without(file, bad + "/checkpoint.zero-0-of-1.safetensors", e.name);
    } else {
      copy_without(file, bad_ck, e.name);
    }
    const mt::testing::Caught caught = mt::testing::catch_error([&] { resume(bad_ck); });
    EXPECT_TRUE(caught.is_mt_error) << caught.message;
    // The tensor is named, by its file name or as the optimizer's key of the parameter.
    const std::string key = e.name.substr(e.name.rfind('.') + 1);
    const bool named = caught.message.find(e.name) != std::string::npos ||
                       (c.zero_stage == 1 && caught.message.find("'" + key + "'") != std::string::npos);
    EXPECT_TRUE(named) << caught.message;
    ++state_tensors;
  }
  EXPECT_GT(state_tensors, 0);
}

}  // namespace

TEST(StateCompleteness, EveryTensorOfAPlainCheckpointIsRequired) {
  expect_every_tensor_required({"fp32", {}});
}

TEST(StateCompleteness, EveryMasterAndMomentOfABf16CheckpointIsRequired) {
  expect_every_tensor_required({"bf16 masters", {.precision = tr::Precision::kBf16, .param_dtype = mt::kBFloat16}});
}

TEST(StateCompleteness, EveryKahanCompensationIsRequired) {
  expect_every_tensor_required({"bf16 kahan",
                                {.precision = tr::Precision::kBf16,
                                 .param_dtype = mt::kBFloat16,
                                 .weight_update = tr::WeightUpdate::kKahan}});
}

TEST(StateCompleteness, EveryFp8ScaleAndAmaxHistoryIsRequired) {
  expect_every_tensor_required({"fp8", {.precision = tr::Precision::kFp8, .fp8 = {.amax_history_len = 2}}});
}

TEST(StateCompleteness, EveryTensorOfAZeroShardIsRequired) {
  expect_every_tensor_required({"zero fp32", {}, 1});
  expect_every_tensor_required({"zero bf16", {.precision = tr::Precision::kBf16, .param_dtype = mt::kBFloat16}, 1});
}

TEST(StateCompleteness, OptimizerLoadStateDictRefusesMissingAndSurplusState) {
  auto model = small_model();
  mt::optim::AdamW opt(model->parameters(), {.lr = 1e-2, .amsgrad = true});
  for (int i = 0; i < 2; ++i) {
    opt.zero_grad();
    mt::sum(model->forward(mt::ones({2, 1, 4, 4}))).backward();
    opt.step();
  }
  const mt::optim::OptimizerStateDict good = opt.state_dict();
  opt.load_state_dict(good);  // complete: accepted
  for (const char* key : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
    mt::optim::OptimizerStateDict sd = good;
    *sd.state[1].state_dict_entry(key) = mt::Tensor();
    EXPECT_MT_ERROR(opt.load_state_dict(sd), "AdamW.load_state_dict", "has taken 2 steps", std::string("'") + key + "'");
  }
  mt::optim::OptimizerStateDict unstepped = good;
  unstepped.state[0].step = 0;  // moments without a step
  EXPECT_MT_ERROR(opt.load_state_dict(unstepped), "has taken 0 steps", "'exp_avg'", "before its first step");
  mt::optim::OptimizerStateDict surplus = good;
  surplus.state[0].momentum_buffer = mt::zeros(model->parameters()[0].shape());
  EXPECT_MT_ERROR(opt.load_state_dict(surplus), "'momentum_buffer'", "does not keep");

  mt::optim::SGD sgd(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  sgd.zero_grad();
  mt::sum(model->forward(mt::ones({2, 1, 4, 4}))).backward();
  sgd.step();
  mt::optim::OptimizerStateDict no_buffer = sgd.state_dict();
  no_buffer.state[2].momentum_buffer = mt::Tensor();
  EXPECT_MT_ERROR(sgd.load_state_dict(no_buffer), "SGD.load_state_dict", "'momentum_buffer'");
}
