// Trains a user-defined model with mt::train::Trainer: your model, your data, an optimizer, and one
// precision switch. The Trainer runs autocast, the GradScaler, master weights, evaluation, metrics
// and checkpoints; resuming from a checkpoint continues the run bit for bit.
//
//   mixtrain_example_train_custom_model [DATA_DIR | --synthetic] [fp32|bf16|fp16] [OUT_DIR]
//
// DATA_DIR holds Fashion-MNIST (default /usr/share/datasets/fashion-mnist, from Debian's
// dataset-fashion-mnist package); --synthetic trains on random data instead (seconds, for a try).
// Run it twice with the same OUT_DIR: the second run resumes from OUT_DIR/checkpoint.safetensors
// and trains one more epoch.
#include <mixtrain/mixtrain.h>
#include <mixtrain/nn/modules.h>
#include <mixtrain/train/trainer.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

namespace mt = mixtrain;

// A model of your own: any mt::nn::Module with registered submodules and a forward.
// Flatten -> Linear(784, H) -> ReLU -> [x + Dropout(GELU(Linear(H, H)))] -> LayerNorm -> Linear(H, 10)
class ResidualMLP : public mt::nn::Module {
 public:
  explicit ResidualMLP(int64_t hidden = 256) : Module("ResidualMLP") {
    flatten_ = register_module("flatten", mt::nn::Flatten());
    in_ = register_module("in", mt::nn::Linear(784, hidden));
    block_ = register_module("block",
                             mt::nn::Sequential(mt::nn::Linear(hidden, hidden), mt::nn::GELU(), mt::nn::Dropout(0.1)));
    norm_ = register_module("norm", mt::nn::LayerNorm(hidden));
    out_ = register_module("out", mt::nn::Linear(hidden, 10));
  }

  mt::Tensor forward(const mt::Tensor& x) override {
    mt::Tensor h = mt::relu(in_->forward(flatten_->forward(x)));
    h = h + block_->forward(h);  // residual connection
    return out_->forward(norm_->forward(h));
  }

 private:
  std::shared_ptr<mt::nn::Flatten> flatten_;
  std::shared_ptr<mt::nn::Linear> in_, out_;
  std::shared_ptr<mt::nn::Sequential> block_;
  std::shared_ptr<mt::nn::LayerNorm> norm_;
};

int main(int argc, char** argv) {
  try {
    const std::string source = argc > 1 ? argv[1] : mt::data::kFashionMNISTDefaultDir;
    const std::string precision = argc > 2 ? argv[2] : "bf16";
    const std::string out_dir = argc > 3 ? argv[3] : "runs/custom-model";

    // Data: any mt::data::Dataset works (batches of input and integer class targets here).
    std::unique_ptr<mt::data::Dataset> train_set, test_set;
    if (source == "--synthetic") {
      train_set = std::make_unique<mt::data::SyntheticDataset>(2048, mt::Shape{1, 28, 28}, 10, /*seed=*/0);
      test_set = std::make_unique<mt::data::SyntheticDataset>(512, mt::Shape{1, 28, 28}, 10, /*seed=*/1);
    } else {
      // Throws mt::Error with the install hint when the files are missing.
      train_set = std::make_unique<mt::data::FashionMNIST>(source, mt::data::Split::kTrain);
      test_set = std::make_unique<mt::data::FashionMNIST>(source, mt::data::Split::kTest);
    }

    // Seed before building the model: its initial weights and the Dropout's generator come from
    // the default generator.
    mt::manual_seed(0);
    ResidualMLP model;

    mt::train::TrainerOptions options;
    options.precision.precision = mt::train::parse_precision(precision);  // the one switch
    options.epochs = 1;
    options.batch_size = 128;
    options.out_dir = out_dir;
    options.model_name = "ResidualMLP";
    options.checkpoint_every = 200;
    // A previous run's final state: continue it for one more epoch (the same batches, in the same
    // order, as a single longer run would have seen).
    const std::string checkpoint = out_dir + "/checkpoint.safetensors";
    if (std::filesystem::exists(checkpoint)) {
      options.resume_from = checkpoint;
      options.epochs = 1 + mt::io::load_checkpoint(checkpoint).meta_int("epoch");
    }
    options.on_epoch = [](const mt::train::EpochInfo& e) {
      std::printf("epoch %lld  train loss %.4f  test accuracy %.2f%%  (%.1f s)\n", static_cast<long long>(e.epoch),
                  e.train_loss, e.eval && e.eval->accuracy ? 100.0 * *e.eval->accuracy : 0.0, e.seconds);
      std::fflush(stdout);
    };

    // The optimizer is built by the Trainer (after it has converted the model, when master
    // weights are 16-bit); mt::train::adamw is a ready-made factory.
    mt::train::Trainer trainer(model, mt::train::adamw(1e-3, 0.01), *train_set, test_set.get(), options);
    const mt::train::TrainSummary s = trainer.fit();
    std::printf("%s: %lld steps, test accuracy %.2f%%, %.2f ms/step, peak %.1f MiB, %lld skipped steps\n",
                s.precision.c_str(), static_cast<long long>(s.steps), s.test_accuracy ? 100.0 * *s.test_accuracy : 0.0,
                s.step_ms_median, static_cast<double>(s.peak_bytes) / (1 << 20),
                static_cast<long long>(s.skipped_steps));
    std::printf("wrote %s/summary.json, metrics.jsonl, model.safetensors, checkpoint.safetensors\n", out_dir.c_str());
    return 0;
  } catch (const std::exception& e) {  // mt::Error included: one clear line
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
