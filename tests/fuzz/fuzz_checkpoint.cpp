// libFuzzer harness: resuming a Trainer from an arbitrary file (the safetensors reader, then every
// metadata entry and tensor of a checkpoint, validated against a small fp16 run: model, optimizer,
// GradScaler, generators, position). The seeds are checkpoints of exactly this run.
#include <mixtrain/mixtrain.h>

#include "fuzz_input.h"

namespace mt = mixtrain;

namespace {

// The run of the seed checkpoints (tests/fuzz/make_seeds.cpp writes them with the same setup).
std::unique_ptr<mt::train::Trainer> make_trainer(mt::nn::Module& model, const mt::data::Dataset& data) {
  mt::train::TrainerOptions o;
  o.precision = {.precision = mt::train::Precision::kFp16};
  o.batch_size = 8;
  o.max_steps = 6;
  o.seed = 3;
  o.resume_overrides = {"total_steps"};
  return std::make_unique<mt::train::Trainer>(model, mt::train::adamw(1e-2, 0.01), data, nullptr, o);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static mt::fuzz::MemFile file("checkpoint");
  static const mt::data::SyntheticDataset train_data(32, {4}, 3, /*seed=*/1);
  const std::string& path = file.set(data, size);
  mt::manual_seed(1);
  mt::nn::Sequential model(mt::nn::Linear(4, 8), mt::nn::ReLU(), mt::nn::Dropout(0.1), mt::nn::Linear(8, 3));
  try {
    make_trainer(model, train_data)->load_checkpoint(path);
  } catch (const mt::Error&) {
  }
  return 0;
}
