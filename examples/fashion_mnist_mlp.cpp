// Trains a small MLP on Fashion-MNIST three times, in fp32, bf16 and fp16, and compares them.
//
//   mixtrain_example_fashion_mnist_mlp [data_dir] [epochs]
//
// Model: Flatten -> Linear(784, 256) -> ReLU -> Linear(256, 10), plain SGD. Every run starts from the
// same weights and sees the batches in the same order, so the differences come from precision alone.
//
// How the 16-bit runs work (the manual form of what mt::amp::Autocast and GradScaler will do):
// - The weights stay fp32 ("master weights"). Each step casts them and the input to the 16-bit
//   dtype for the forward matmuls. The cast is recorded by autograd, so the weight gradients come
//   back in fp32 and the update adds small steps to fp32 values, which 16 bits would round away.
// - The logits go back to fp32 before the loss: log-softmax wants fp32's precision.
// - fp16 has a small range (smallest normal 6e-5), so the loss is multiplied by a fixed 1024 before
//   backward to keep small gradients from flushing to zero, and the update divides it back out.
//   A step whose gradients overflowed (inf/NaN) is skipped. bf16 has fp32's range and needs neither.
#include <mixtrain/mixtrain.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mt = mixtrain;
namespace F = mt::nn::functional;

namespace {

constexpr int64_t kPixels = 28 * 28;

struct Dataset {
  std::vector<float> images;  // n x 784, normalised
  std::vector<int64_t> labels;
  int64_t size = 0;
};

std::vector<uint8_t> read_gzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error(path + ": cannot open");
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> buf(1 << 20);
  int n;
  while ((n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()))) > 0)
    bytes.insert(bytes.end(), buf.data(), buf.data() + n);
  const bool failed = n < 0;
  gzclose(f);
  if (failed) throw std::runtime_error(path + ": corrupt gzip data");
  return bytes;
}

uint32_t big_endian32(const std::vector<uint8_t>& b, size_t offset) {
  return uint32_t{b[offset]} << 24 | uint32_t{b[offset + 1]} << 16 | uint32_t{b[offset + 2]} << 8 | b[offset + 3];
}

void check(bool ok, const std::string& file, const std::string& what) {
  if (!ok) throw std::runtime_error(file + ": not a Fashion-MNIST IDX file (" + what + ")");
}

// IDX format: a big-endian magic (0x803: 3-D uint8 images, 0x801: 1-D uint8 labels), the dims, the bytes.
Dataset load(const std::string& dir, const std::string& split) {
  const std::string image_file = dir + "/" + split + "-images-idx3-ubyte.gz";
  const std::string label_file = dir + "/" + split + "-labels-idx1-ubyte.gz";
  std::vector<uint8_t> img = read_gzip(image_file), lab = read_gzip(label_file);
  check(img.size() >= 16 && big_endian32(img, 0) == 0x00000803, image_file, "magic");
  check(lab.size() >= 8 && big_endian32(lab, 0) == 0x00000801, label_file, "magic");
  Dataset d;
  d.size = big_endian32(img, 4);
  check(big_endian32(img, 8) == 28 && big_endian32(img, 12) == 28, image_file, "images are not 28x28");
  check(img.size() == 16 + static_cast<size_t>(d.size) * kPixels, image_file, "size does not match the header");
  check(big_endian32(lab, 4) == d.size && lab.size() == 8 + static_cast<size_t>(d.size), label_file,
        "label count does not match the images");
  // Scale to [0, 1], then standardise with the training set's mean and std (0.2860, 0.3530).
  d.images.resize(img.size() - 16);
  for (size_t i = 0; i < d.images.size(); ++i) d.images[i] = (img[16 + i] / 255.0f - 0.2860f) / 0.3530f;
  d.labels.assign(lab.begin() + 8, lab.end());
  for (int64_t y : d.labels) check(y < 10, label_file, "label out of range");
  return d;
}

// The rows `order[begin, end)` of a dataset as an image batch [B, 28, 28] and a label batch [B].
std::pair<mt::Tensor, mt::Tensor> batch(const Dataset& d, const std::vector<int64_t>& order, int64_t begin,
                                        int64_t end) {
  std::vector<float> x;
  std::vector<int64_t> y;
  x.reserve((end - begin) * kPixels);
  for (int64_t i = begin; i < end; ++i) {
    const float* row = d.images.data() + order[i] * kPixels;
    x.insert(x.end(), row, row + kPixels);
    y.push_back(d.labels[order[i]]);
  }
  return {mt::from_vector(x, {end - begin, 28, 28}), mt::from_vector(y)};
}

struct Mlp {
  mt::Tensor w1, b1, w2, b2;  // fp32 master weights, PyTorch layout: weight [out, in]
};

Mlp init_mlp(uint64_t seed) {
  mt::Generator gen(seed);
  // PyTorch's default Linear init: weight and bias uniform in +-1/sqrt(fan_in).
  auto param = [&](const mt::Shape& shape, int64_t fan_in) {
    mt::Tensor t = mt::empty(shape);
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    mt::uniform_(t, -bound, bound, &gen);
    return t.requires_grad_();
  };
  return {param({256, 784}, 784), param({256}, 784), param({10, 256}, 256), param({10}, 256)};
}

// Logits in `dtype` (to() returns the tensor itself when the dtype already matches).
mt::Tensor forward(const Mlp& m, const mt::Tensor& images, mt::DType dtype) {
  mt::Tensor x = images.flatten(1).to(dtype);
  mt::Tensor h = mt::relu(mt::linear(x, m.w1.to(dtype), m.b1.to(dtype)));
  return mt::linear(h, m.w2.to(dtype), m.b2.to(dtype));
}

double test_accuracy(const Mlp& m, const Dataset& test, mt::DType dtype) {
  mt::NoGradGuard no_grad;  // evaluation records no graph
  std::vector<int64_t> order(test.size);
  std::iota(order.begin(), order.end(), 0);
  int64_t correct = 0;
  for (int64_t b = 0; b < test.size; b += 1000) {
    auto [x, y] = batch(test, order, b, std::min(b + 1000, test.size));
    std::vector<int64_t> predicted = mt::argmax(forward(m, x, dtype), 1).to_vector<int64_t>();
    std::vector<int64_t> labels = y.to_vector<int64_t>();
    for (size_t i = 0; i < labels.size(); ++i) correct += predicted[i] == labels[i];
  }
  return 100.0 * correct / test.size;
}

struct Result {
  double final_loss, accuracy, seconds_per_epoch;
  int64_t skipped_steps;
};

Result train(const char* label, mt::DType dtype, const Dataset& train_set, const Dataset& test_set, int epochs) {
  constexpr int64_t kBatch = 128;
  constexpr double kLearningRate = 0.1;
  const double loss_scale = dtype == mt::kFloat16 ? 1024.0 : 1.0;
  Mlp m = init_mlp(/*seed=*/0);
  std::vector<mt::Tensor*> params{&m.w1, &m.b1, &m.w2, &m.b2};
  std::mt19937_64 rng(/*seed=*/0);
  std::vector<int64_t> order(train_set.size);
  std::iota(order.begin(), order.end(), 0);
  Result r{};
  std::printf("%s:\n", label);
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    std::shuffle(order.begin(), order.end(), rng);
    double loss_sum = 0;
    int64_t steps = 0;
    for (int64_t b = 0; b + kBatch <= train_set.size; b += kBatch, ++steps) {
      auto [x, y] = batch(train_set, order, b, b + kBatch);
      mt::Tensor loss = F::cross_entropy(forward(m, x, dtype).to(mt::kFloat32), y);
      loss_sum += loss.item<double>();
      (loss_scale == 1.0 ? loss : loss * loss_scale).backward();
      mt::NoGradGuard no_grad;  // the update must not be recorded (and may write to the leaves)
      bool finite = true;
      for (mt::Tensor* p : params) finite = finite && std::isfinite(mt::sum(p->grad()).item<double>());
      for (mt::Tensor* p : params) {
        // SGD on the fp32 master weights (the scale divided out); the next backward starts afresh.
        if (finite) p->add_(p->grad(), -kLearningRate / loss_scale);
        p->set_grad(mt::Tensor());
      }
      r.skipped_steps += !finite;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.final_loss = loss_sum / steps;
    r.seconds_per_epoch += seconds / epochs;
    std::printf("  epoch %d/%d  train loss %.4f  (%.1f s)\n", epoch, epochs, r.final_loss, seconds);
    std::fflush(stdout);
  }
  r.accuracy = test_accuracy(m, test_set, dtype);
  std::printf("  test accuracy %.2f%%\n", r.accuracy);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
    const int epochs = argc > 2 ? std::stoi(argv[2]) : 2;
    if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz")) {
      std::fprintf(stderr,
                   "error: Fashion-MNIST not found in %s\n  install it with: apt-get install dataset-fashion-mnist\n",
                   dir.c_str());
      return 1;
    }
    const Dataset train_set = load(dir, "train"), test_set = load(dir, "t10k");
    std::printf("Fashion-MNIST: %lld training and %lld test images from %s\n", static_cast<long long>(train_set.size),
                static_cast<long long>(test_set.size), dir.c_str());
    std::printf("MLP 784-256-10, SGD lr 0.1, batch 128, %d epoch(s) per precision\n\n", epochs);
    std::vector<Result> results;
    results.push_back(train("fp32", mt::kFloat32, train_set, test_set, epochs));
    results.push_back(train("bf16 (fp32 master weights)", mt::kBFloat16, train_set, test_set, epochs));
    results.push_back(train("fp16 (fp32 master weights, loss scale 1024)", mt::kFloat16, train_set, test_set, epochs));

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
