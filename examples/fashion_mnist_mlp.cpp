// Trains a small MLP on Fashion-MNIST three times, in fp32, bf16 and fp16, and compares them: the
// AMP loop of PyTorch, written with mixtrain.
//
//   mixtrain_example_fashion_mnist_mlp [data_dir] [epochs]
//
// Model: Flatten -> Linear(784, 256) -> ReLU -> Linear(256, 10), AdamW. Every run starts from the
// same weights and sees the batches in the same order, so the differences come from precision alone.
// - The parameters stay fp32. mt::amp::Autocast runs the forward's matrix products in the 16-bit
//   dtype (the weights are cast for them, and the casts are recorded by autograd, so the gradients
//   come back fp32) and the loss in fp32.
// - fp16 has a small range (smallest normal 6e-5): mt::amp::GradScaler multiplies the loss before
//   backward so that small gradients do not flush to zero, unscales them before the update, skips a
//   step whose gradients overflowed and adapts the scale. bf16 has fp32's range and needs no scaler.
// `mixtrain compare` (the CLI) runs this comparison for the named models, with checkpoints and a report.
#include <mixtrain/mixtrain.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace mt = mixtrain;
namespace F = mt::nn::functional;

namespace {

struct Result {
  double final_loss = 0, accuracy = 0, seconds_per_epoch = 0;
  int64_t skipped_steps = 0;
};

// fp32 when `dtype` is empty, else the forward and loss under autocast to `dtype`.
Result train(const char* label, std::optional<mt::DType> dtype, const mt::data::Dataset& train_set,
             const mt::data::Dataset& test_set, int epochs) {
  mt::manual_seed(0);  // the same initial weights in every run
  mt::nn::Sequential model(mt::nn::Flatten(), mt::nn::Linear(784, 256), mt::nn::ReLU(), mt::nn::Linear(256, 10));
  mt::optim::AdamW opt(model.parameters(), {.lr = 1e-3, .weight_decay = 0.01});
  mt::amp::GradScaler scaler({.enabled = dtype == mt::kFloat16});
  mt::data::DataLoader loader(train_set, {.batch_size = 128, .shuffle = true, .seed = 0, .drop_last = true});
  Result r;
  std::printf("%s:\n", label);
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    loader.set_epoch(epoch);
    const auto start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    int64_t steps = 0;
    for (const mt::data::Batch& batch : loader) {
      opt.zero_grad();
      mt::Tensor loss;
      {
        mt::amp::Autocast autocast(mt::kCPU, dtype, dtype.has_value());  // forward and loss only
        loss = F::cross_entropy(model(batch.input), batch.target);
      }
      scaler.scale(loss).backward();
      r.skipped_steps += !scaler.step(opt);  // unscales; skips the update if a gradient is inf/NaN
      scaler.update();
      loss_sum += loss.item<double>();
      ++steps;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.final_loss = loss_sum / static_cast<double>(steps);
    r.seconds_per_epoch += seconds / epochs;
    std::printf("  epoch %d/%d  train loss %.4f  (%.1f s)\n", epoch, epochs, r.final_loss, seconds);
    std::fflush(stdout);
  }
  // Evaluation in the same precision, without a graph.
  mt::NoGradGuard no_grad;
  int64_t correct = 0, seen = 0;
  mt::data::DataLoader test_loader(test_set, {.batch_size = 1000, .shuffle = false});
  for (const mt::data::Batch& batch : test_loader) {
    mt::amp::Autocast autocast(mt::kCPU, dtype, dtype.has_value());
    const std::vector<int64_t> predicted = mt::argmax(model(batch.input), 1).to_vector<int64_t>();
    const std::vector<int64_t> labels = batch.target.to_vector<int64_t>();
    for (size_t i = 0; i < labels.size(); ++i) correct += predicted[i] == labels[i];
    seen += static_cast<int64_t>(labels.size());
  }
  r.accuracy = 100.0 * static_cast<double>(correct) / static_cast<double>(seen);
  std::printf("  test accuracy %.2f%%\n", r.accuracy);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string dir = argc > 1 ? argv[1] : std::string(mt::data::kFashionMNISTDefaultDir);
    const int epochs = argc > 2 ? std::stoi(argv[2]) : 2;
    // A missing or damaged dataset is an mt::Error that says how to install it.
    const mt::data::FashionMNIST train_set(dir, mt::data::Split::kTrain), test_set(dir, mt::data::Split::kTest);
    std::printf("Fashion-MNIST: %lld training and %lld test images from %s\n",
                static_cast<long long>(train_set.size()), static_cast<long long>(test_set.size()), dir.c_str());
    std::printf("MLP 784-256-10, AdamW lr 0.001, batch 128, %d epoch(s) per precision\n\n", epochs);
    std::vector<Result> results;
    results.push_back(train("fp32", std::nullopt, train_set, test_set, epochs));
    results.push_back(train("bf16 autocast", mt::kBFloat16, train_set, test_set, epochs));
    results.push_back(train("fp16 autocast with the GradScaler", mt::kFloat16, train_set, test_set, epochs));

    std::printf("\n%-6s %12s %14s %12s %14s\n", "dtype", "train loss", "test accuracy", "s / epoch", "skipped steps");
    const char* short_names[] = {"fp32", "bf16", "fp16"};
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::printf("%-6s %12.4f %13.2f%% %12.2f %14lld\n", short_names[i], r.final_loss, r.accuracy, r.seconds_per_epoch,
                  static_cast<long long>(r.skipped_steps));
    }
    return 0;
  } catch (const std::exception& e) {  // mt::Error included
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
