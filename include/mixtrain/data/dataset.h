// mixtrain/data/dataset.h: map-style datasets (an example per index) and the ones mixtrain ships:
// MNIST and Fashion-MNIST (IDX files), a byte-level text dataset for language models and a seeded
// synthetic dataset for benchmarks.
//
// get_batch() is the fast path the DataLoader uses: it writes a whole batch into two freshly
// allocated tensors (one pass over the source bytes, no per-example tensors). Every dataset here
// is immutable after construction, so get/get_batch are safe to call from the loader's prefetch
// thread while the training thread runs. Tensors are on the CPU.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "mixtrain/tensor.h"

namespace mixtrain::data {

enum class Split { kTrain, kTest };

// One example: input without a batch dimension, target likewise (0-dim for a class label).
struct Example {
  Tensor input;
  Tensor target;
};

// A batch: input [B, ...], target [B] for classification or [B, T] for sequence targets.
struct Batch {
  Tensor input;
  Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Examples at `indices` (each in [0, size()), repeats allowed), stacked along a new dim 0.
  // Must be thread-safe: the DataLoader calls it from its prefetch thread.
  virtual Batch get_batch(std::span<const int64_t> indices) const = 0;
  // One example: get_batch({index}) with the batch dimension removed.
  virtual Example get(int64_t index) const;
  // A 64-bit fingerprint of the contents (every example's input and target values, shapes and
  // dtypes, in order). Training checkpoints record it, so that a resume on other data is refused.
  // Not cryptographic: it tells datasets apart, it does not authenticate them. The default reads
  // every example once through get_batch(); the datasets here hash their stored bytes instead.
  virtual uint64_t fingerprint() const;

 protected:
  // Throws mt::Error naming `who` when an index is outside [0, size()).
  void check_indices(std::span<const int64_t> indices, const char* who) const;
};

// ---- MNIST / Fashion-MNIST ---------------------------------------------------------------------

// Where Debian's dataset-fashion-mnist package installs the four .gz files.
inline constexpr const char* kFashionMNISTDefaultDir = "/usr/share/datasets/fashion-mnist";

// Images are scaled to [0, 1] (pixel / 255) and then, when normalize is set, to (x - mean) / std.
// The defaults are the training-set pixel statistics.
struct FashionMNISTOptions {
  bool normalize = true;
  float mean = 0.2860f;
  float std = 0.3530f;
};
struct MNISTOptions {
  bool normalize = true;
  float mean = 0.1307f;
  float std = 0.3081f;
};

// The 28x28 grey-scale image datasets in IDX format, loaded fully into memory as uint8 (47 MB for
// a 60000-image training set) and converted per batch. Files are looked up in `dir` under their
// original names (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
// t10k-labels-idx1-ubyte), each with or without ".gz".
// Examples: input float32 [1, 28, 28], target int64 0-dim in [0, 10).
// Batches:  input float32 [B, 1, 28, 28], target int64 [B].
class ImageClassificationDataset : public Dataset {
 public:
  static constexpr int64_t kNumClasses = 10;

  int64_t size() const override { return labels_.numel(); }
  Batch get_batch(std::span<const int64_t> indices) const override;
  uint64_t fingerprint() const override;

  // The raw data as read from the files: images uint8 [N, 28, 28], labels uint8 [N].
  const Tensor& images() const { return images_; }
  const Tensor& labels() const { return labels_; }
  // The float value each pixel byte maps to (after scaling and normalisation).
  float pixel_value(uint8_t byte) const { return lut_[byte]; }

 protected:
  // `name` is used in messages; `install_hint` is appended when a file is missing.
  ImageClassificationDataset(const char* name, const std::string& dir, Split split, bool normalize, float mean,
                             float std, const char* install_hint);

 private:
  Tensor images_;
  Tensor labels_;
  std::array<float, 256> lut_{};
};

class FashionMNIST : public ImageClassificationDataset {
 public:
  explicit FashionMNIST(const std::string& dir = kFashionMNISTDefaultDir, Split split = Split::kTrain,
                        FashionMNISTOptions options = {});
  // "T-shirt/top", "Trouser", ..., "Ankle boot", indexed by label.
  static const std::array<std::string_view, 10>& class_names();
};

class MNIST : public ImageClassificationDataset {
 public:
  MNIST(const std::string& dir, Split split = Split::kTrain, MNISTOptions options = {});
};

// ---- Byte-level text ---------------------------------------------------------------------------

enum class TextPart { kAll, kTrain, kVal };

struct TextOptions {
  // kTrain is the first round(n * (1 - val_fraction)) of the n bytes, kVal the rest (the split is
  // by position, so it is deterministic and the two parts never share a window).
  TextPart part = TextPart::kAll;
  double val_fraction = 0.1;
  // Distance in bytes between the starts of consecutive examples (1: every window; context:
  // non-overlapping windows).
  int64_t stride = 1;
  // Largest file accepted.
  int64_t max_bytes = int64_t{1} << 31;
};

// The bytes of a file as tokens 0..255 (vocabulary 256; UTF-8 text becomes its byte sequence).
// Example i is x = bytes[s .. s+T), y = bytes[s+1 .. s+T+1) with s = i * stride and T = context,
// both int64 [T]; batches are int64 [B, T] for input and target. The selected part must hold at
// least context + 1 bytes.
class TextDataset : public Dataset {
 public:
  static constexpr int64_t kVocabSize = 256;

  explicit TextDataset(const std::string& path, int64_t context = 128, TextOptions options = {});
  // The same over in-memory text (`name` is used in messages).
  static TextDataset from_string(std::string text, int64_t context = 128, TextOptions options = {},
                                 std::string name = "<string>");

  int64_t size() const override;
  Batch get_batch(std::span<const int64_t> indices) const override;
  uint64_t fingerprint() const override;

  int64_t context() const { return context_; }
  int64_t vocab_size() const { return kVocabSize; }
  // The bytes of the selected part.
  std::string_view text() const { return std::string_view(text_).substr(begin_, end_ - begin_); }

  // Bytes -> int64 tokens [n], and integer tokens (any shape, values 0..255) -> bytes.
  static Tensor encode(std::string_view text);
  static std::string decode(const Tensor& tokens);

 private:
  TextDataset(std::string text, std::string name, int64_t context, TextOptions options);
  std::string text_;
  int64_t begin_ = 0, end_ = 0;  // byte range of the selected part
  int64_t context_;
  int64_t stride_;
};

// ---- Synthetic -----------------------------------------------------------------------------------

// Benchmark data: `size` examples with inputs of `input_shape` (a floating dtype) and int64 labels
// uniform in [0, num_classes). Inputs are copied from a pool of kPoolSize standard-normal values
// drawn once (randn with a Generator seeded by `seed`): example i is the window of the pool (read
// cyclically) starting at a per-example pseudo-random offset, and its label comes from Philox
// keyed by `seed`. So every example is deterministic whatever batch it is fetched in and whatever
// the thread count, a batch costs one copy, and the memory is the pool (4 MiB in fp32). Examples
// are not independent (windows overlap), which does not matter for throughput measurements.
// Batches: input [B, input_shape...], target int64 [B].
class SyntheticDataset : public Dataset {
 public:
  SyntheticDataset(int64_t size, const Shape& input_shape, int64_t num_classes, uint64_t seed = 0,
                   DType dtype = kFloat32);

  int64_t size() const override { return size_; }
  Batch get_batch(std::span<const int64_t> indices) const override;
  uint64_t fingerprint() const override;  // of the parameters, which determine every example
  int64_t num_classes() const { return num_classes_; }

  static constexpr int64_t kPoolSize = int64_t{1} << 20;

 private:
  int64_t size_;
  Shape input_shape_;
  int64_t num_classes_;
  uint64_t seed_;
  Tensor pool_;  // [kPoolSize] of the input dtype
};

}  // namespace mixtrain::data
