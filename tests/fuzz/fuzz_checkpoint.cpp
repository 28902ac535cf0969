// libFuzzer harness: resuming a Trainer from an arbitrary file (the safetensors reader, then every
// metadata entry and tensor of a checkpoint, validated against a small fp16 run: model, optimizer,
// GradScaler, generators, position). The seeds are checkpoints of exactly this run, one with a
// moment removed; an accepted file must leave the optimizer's state complete.
#include <mixtrain/mixtrain.h>

#include <algorithm>

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
    const auto trainer = make_trainer(model, train_data);
    trainer->load_checkpoint(path);
    // Accepted: then the state is complete. A parameter that has taken a step holds every tensor its
    // optimizer keeps (a silently fresh moment is a finding, like a crash).
    const mt::optim::Optimizer& opt = trainer->optimizer();
    for (size_t i = 0; i < opt.num_parameters(); ++i) {
      if (opt.state(i).step == 0) continue;
      const auto held = opt.state(i).named_tensors();
      for (const std::string& key : opt.stepped_state_keys(i))
        if (std::none_of(held.begin(), held.end(), [&](const auto& kv) { return kv.first == key; })) __builtin_trap();
    }
  } catch (const mt::Error&) {
  }
  return 0;
}
