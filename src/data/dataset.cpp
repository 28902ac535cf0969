// Datasets: MNIST / Fashion-MNIST from IDX files, byte-level text, and synthetic data.
//
// Each get_batch allocates its two output tensors once and fills them in one pass; nothing here
// uses OpenMP because get_batch runs on the DataLoader's prefetch thread, next to the training
// thread's OpenMP team (a second team there would oversubscribe the cores).
#include "mixtrain/data/dataset.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "mixtrain/data/idx.h"
#include "mixtrain/factory.h"
#include "mixtrain/io/file.h"
#include "mixtrain/random.h"
#include "data/fingerprint.h"
#include "data/windows.h"

namespace mixtrain::data {
namespace fs = std::filesystem;
using hashing::hash_bytes;
using hashing::kFingerprintSeed;

namespace {

// A view of row 0 of a [1, ...] batch without the leading dimension (shares storage).
Tensor drop_batch_dim(const Tensor& t) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.storage();
  impl->offset = t.storage_offset();
  for (int d = 1; d < t.dim(); ++d) impl->shape.push_back(t.size(d));
  impl->strides = contiguous_strides(impl->shape);
  impl->dtype = t.dtype();
  return Tensor(std::move(impl));
}

}  // namespace

Example Dataset::get(int64_t index) const {
  Batch b = get_batch(std::span<const int64_t>(&index, 1));
  return {drop_batch_dim(b.input), drop_batch_dim(b.target)};
}

namespace {

uint64_t hash_tensor(const Tensor& t, uint64_t h) {
  const Tensor c = t.contiguous();
  const int64_t meta[] = {static_cast<int64_t>(t.dtype()), t.dim()};
  h = hash_bytes(meta, sizeof(meta), h);
  h = hash_bytes(t.shape().data(), sizeof(int64_t) * static_cast<size_t>(t.dim()), h);
  return hash_bytes(c.raw_data(), c.nbytes(), h);
}

}  // namespace

uint64_t Dataset::fingerprint() const {
  uint64_t h = hash_bytes("dataset", 7, kFingerprintSeed);
  const int64_t n = size();
  std::vector<int64_t> idx;
  for (int64_t begin = 0; begin < n; begin += 256) {
    idx.clear();
    for (int64_t i = begin; i < std::min(n, begin + 256); ++i) idx.push_back(i);
    const Batch b = get_batch(idx);
    h = hash_tensor(b.target, hash_tensor(b.input, h));
  }
  return h;
}

void Dataset::check_indices(std::span<const int64_t> indices, const char* who) const {
  const int64_t n = size();
  for (int64_t i : indices)
    MT_CHECK(i >= 0 && i < n, who, ": index ", i, " is out of range for a dataset of ", n, " examples");
}

// ---- MNIST / Fashion-MNIST ---------------------------------------------------------------------

namespace {

constexpr int64_t kImageSide = 28;
constexpr int64_t kImagePixels = kImageSide * kImageSide;

// dir/name, else dir/name.gz, else an error that says what is missing and how to get it.
std::string find_idx_file(const char* who, const std::string& dir, const std::string& name, const char* hint) {
  std::error_code ec;
  for (const std::string& candidate : {name, name + ".gz"}) {
    fs::path p = fs::path(dir) / candidate;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  MT_FAIL(who, ": missing file '", name, "' (or '", name, ".gz') in directory '", dir, "'", hint);
}

}  // namespace

ImageClassificationDataset::ImageClassificationDataset(const char* name, const std::string& dir, Split split,
                                                       bool normalize, float mean, float std,
                                                       const char* install_hint) {
  std::error_code ec;
  MT_CHECK(fs::is_directory(dir, ec), name, ": dataset directory '", dir, "' does not exist", install_hint);
  MT_CHECK(!normalize || (std > 0 && std::isfinite(std) && std::isfinite(mean)), name,
           ": normalisation needs a finite mean and a positive std, got mean ", mean, " std ", std);
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string images_path = find_idx_file(name, dir, prefix + "-images-idx3-ubyte", install_hint);
  const std::string labels_path = find_idx_file(name, dir, prefix + "-labels-idx1-ubyte", install_hint);

  images_ = read_idx(images_path);
  MT_CHECK(
      images_.dtype() == kUInt8 && images_.dim() == 3 && images_.size(1) == kImageSide && images_.size(2) == kImageSide,
      name, ": '", images_path, "' holds ", describe(images_), ", expected uint8 images [N, 28, 28]");
  labels_ = read_idx(labels_path);
  MT_CHECK(labels_.dtype() == kUInt8 && labels_.dim() == 1, name, ": '", labels_path, "' holds ", describe(labels_),
           ", expected uint8 labels [N]");
  MT_CHECK(labels_.size(0) == images_.size(0), name, ": '", labels_path, "' has ", labels_.size(0), " labels but '",
           images_path, "' has ", images_.size(0), " images");
  const uint8_t* lab = labels_.data_ptr<uint8_t>();
  for (int64_t i = 0; i < labels_.numel(); ++i)
    MT_CHECK(lab[i] < kNumClasses, name, ": '", labels_path, "': label ", int(lab[i]), " at byte offset ", 8 + i,
             " is outside [0, ", kNumClasses, ")");

  // One table lookup per pixel in get_batch; computed in double, rounded once to float.
  for (int v = 0; v < 256; ++v) {
    double x = v / 255.0;
    if (normalize) x = (x - static_cast<double>(mean)) / static_cast<double>(std);
    lut_[v] = static_cast<float>(x);
  }
}

uint64_t ImageClassificationDataset::fingerprint() const {
  // The stored bytes and the pixel mapping (normalisation) determine every example.
  uint64_t h = hash_bytes("images", 6, kFingerprintSeed);
  h = hash_tensor(labels_, hash_tensor(images_, h));
  return hash_bytes(lut_.data(), sizeof(float) * lut_.size(), h);
}

Batch ImageClassificationDataset::get_batch(std::span<const int64_t> indices) const {
  check_indices(indices, "ImageClassificationDataset::get_batch");
  const int64_t b = static_cast<int64_t>(indices.size());
  Tensor input = Tensor::empty({b, 1, kImageSide, kImageSide}, kFloat32);
  Tensor target = Tensor::empty({b}, kInt64);
  const uint8_t* img = images_.data_ptr<uint8_t>();
  const uint8_t* lab = labels_.data_ptr<uint8_t>();
  float* in = input.data_ptr<float>();
  int64_t* tg = target.data_ptr<int64_t>();
  for (int64_t k = 0; k < b; ++k) {
    const uint8_t* src = img + indices[k] * kImagePixels;
    float* dst = in + k * kImagePixels;
    for (int64_t p = 0; p < kImagePixels; ++p) dst[p] = lut_[src[p]];
    tg[k] = lab[indices[k]];
  }
  return {std::move(input), std::move(target)};
}

namespace {
constexpr const char* kFashionHint =
    " (on Debian/Ubuntu install it with: apt-get install dataset-fashion-mnist, which puts it in "
    "/usr/share/datasets/fashion-mnist)";
constexpr const char* kMnistHint = " (download the four files of the original MNIST distribution into that directory)";
}  // namespace

FashionMNIST::FashionMNIST(const std::string& dir, Split split, FashionMNISTOptions o)
    : ImageClassificationDataset("FashionMNIST", dir, split, o.normalize, o.mean, o.std, kFashionHint) {}

const std::array<std::string_view, 10>& FashionMNIST::class_names() {
  static constexpr std::array<std::string_view, 10> kNames = {
      "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
  return kNames;
}

MNIST::MNIST(const std::string& dir, Split split, MNISTOptions o)
    : ImageClassificationDataset("MNIST", dir, split, o.normalize, o.mean, o.std, kMnistHint) {}

// ---- Text ----------------------------------------------------------------------------------------

namespace {

std::string read_whole_file(const std::string& path, int64_t max_bytes) {
  io::ReadFile f(path, "TextDataset");  // regular files only: a FIFO is refused, never waited on
  MT_CHECK(f.size() <= static_cast<uint64_t>(max_bytes), "TextDataset: '", path, "' has ", f.size(),
           " bytes, above the limit of ", max_bytes, " (raise TextOptions::max_bytes)");
  std::string text(static_cast<size_t>(f.size()), '\0');
  f.read_at(text.data(), text.size(), 0);
  return text;
}

std::string_view to_string(TextPart p) {
  switch (p) {
    case TextPart::kAll: return "whole text";
    case TextPart::kTrain: return "train part";
    case TextPart::kVal: return "validation part";
  }
  return "?";
}

}  // namespace

TextDataset::TextDataset(const std::string& path, int64_t context, TextOptions options)
    : TextDataset(read_whole_file(path, options.max_bytes), path, context, options) {}

TextDataset TextDataset::from_string(std::string text, int64_t context, TextOptions options, std::string name) {
  MT_CHECK(static_cast<int64_t>(text.size()) <= options.max_bytes, "TextDataset: '", name, "' has ", text.size(),
           " bytes, above the limit of ", options.max_bytes);
  return TextDataset(std::move(text), std::move(name), context, options);
}

TextDataset::TextDataset(std::string text, std::string name, int64_t context, TextOptions options)
    : text_(std::move(text)), context_(context), stride_(options.stride) {
  MT_CHECK(context >= 1, "TextDataset: context must be at least 1, got ", context);
  MT_CHECK(options.stride >= 1, "TextDataset: stride must be at least 1, got ", options.stride);
  const int64_t n = static_cast<int64_t>(text_.size());
  if (options.part == TextPart::kAll) {
    begin_ = 0;
    end_ = n;
  } else {
    MT_CHECK(options.val_fraction >= 0.0 && options.val_fraction <= 1.0,
             "TextDataset: val_fraction must be in [0, 1], got ", options.val_fraction);
    // Rounded, not truncated: 100 * (1 - 0.2) must give 80 even if the product lands just below.
    const int64_t split_at = std::llround(static_cast<double>(n) * (1.0 - options.val_fraction));
    begin_ = options.part == TextPart::kTrain ? 0 : split_at;
    end_ = options.part == TextPart::kTrain ? split_at : n;
  }
  MT_CHECK(end_ - begin_ >= context + 1, "TextDataset: the ", to_string(options.part), " of '", name, "' has ",
           end_ - begin_, " bytes; a context of ", context, " needs at least ", context + 1,
           " (one window of context bytes plus the next byte as its target)");
}

uint64_t TextDataset::fingerprint() const {
  const int64_t layout[] = {context_, stride_};
  const std::string_view t = text();
  return hash_bytes(t.data(), t.size(), hash_bytes(layout, sizeof(layout), hash_bytes("text", 4, kFingerprintSeed)));
}

int64_t TextDataset::size() const { return (end_ - begin_ - context_ - 1) / stride_ + 1; }

Batch TextDataset::get_batch(std::span<const int64_t> indices) const {
  check_indices(indices, "TextDataset::get_batch");
  const auto* bytes = reinterpret_cast<const unsigned char*>(text_.data()) + begin_;
  return windows::batch(bytes, indices, stride_, context_);
}

Tensor TextDataset::encode(std::string_view text) {
  Tensor out = Tensor::empty({static_cast<int64_t>(text.size())}, kInt64);
  int64_t* p = out.data_ptr<int64_t>();
  for (size_t i = 0; i < text.size(); ++i) p[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string TextDataset::decode(const Tensor& tokens) {
  MT_CHECK(!tokens.is_floating_point() && tokens.dtype() != kBool, "TextDataset::decode: expected integer tokens, got ",
           describe(tokens));
  std::vector<int64_t> v = tokens.to_vector<int64_t>();
  std::string out(v.size(), '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    MT_CHECK(v[i] >= 0 && v[i] < kVocabSize, "TextDataset::decode: token ", v[i], " at position ", i,
             " is outside the byte vocabulary [0, 256)");
    out[i] = static_cast<char>(static_cast<unsigned char>(v[i]));
  }
  return out;
}

// ---- Synthetic -----------------------------------------------------------------------------------

SyntheticDataset::SyntheticDataset(int64_t size, const Shape& input_shape, int64_t num_classes, uint64_t seed,
                                   DType dtype)
    : size_(size), input_shape_(input_shape), num_classes_(num_classes), seed_(seed) {
  MT_CHECK(size >= 0, "SyntheticDataset: size must be non-negative, got ", size);
  MT_CHECK(num_classes >= 1, "SyntheticDataset: num_classes must be at least 1, got ", num_classes);
  MT_CHECK(is_floating(dtype), "SyntheticDataset: inputs need a floating dtype, got ", dtype);
  MT_CHECK(input_shape.size() < kMaxDims, "SyntheticDataset: input shape ", input_shape,
           " leaves no room for the batch dim");
  for (int64_t d : input_shape) MT_CHECK(d >= 0, "SyntheticDataset: negative dimension in input shape ", input_shape);
  Generator gen(seed);
  pool_ = randn({kPoolSize}, {.dtype = dtype, .device = Device{}}, &gen);  // datasets live on the host
}

uint64_t SyntheticDataset::fingerprint() const {
  const int64_t params[] = {size_, num_classes_, static_cast<int64_t>(seed_), static_cast<int64_t>(pool_.dtype()),
                            input_shape_.size()};
  uint64_t h = hash_bytes(params, sizeof(params), hash_bytes("synthetic", 9, kFingerprintSeed));
  return hash_bytes(input_shape_.data(), sizeof(int64_t) * static_cast<size_t>(input_shape_.size()), h);
}

Batch SyntheticDataset::get_batch(std::span<const int64_t> indices) const {
  check_indices(indices, "SyntheticDataset::get_batch");
  const int64_t b = static_cast<int64_t>(indices.size());
  const int64_t m = input_shape_.numel();
  Shape shape = input_shape_;
  shape.insert(0, b);
  Tensor input = Tensor::empty(shape, pool_.dtype());
  Tensor target = Tensor::empty({b}, kInt64);
  const size_t elem = pool_.element_size();
  const char* pool = static_cast<const char*>(pool_.raw_data());
  char* in = static_cast<char*>(input.raw_data());
  int64_t* tg = target.data_ptr<int64_t>();
  for (int64_t k = 0; k < b; ++k) {
    // One Philox block per example: two outputs for the label, two for the pool offset.
    const auto r = random::philox(static_cast<uint64_t>(indices[k]), seed_, /*stream=*/1);
    const uint64_t label_bits = (static_cast<uint64_t>(r[0]) << 32) | r[1];
    const uint64_t offset_bits = (static_cast<uint64_t>(r[2]) << 32) | r[3];
    tg[k] = static_cast<int64_t>(label_bits % static_cast<uint64_t>(num_classes_));
    int64_t at = static_cast<int64_t>(offset_bits % static_cast<uint64_t>(kPoolSize));
    char* dst = in + static_cast<size_t>(k * m) * elem;
    for (int64_t done = 0; done < m;) {  // the window wraps around the end of the pool
      const int64_t n = std::min(m - done, kPoolSize - at);
      std::memcpy(dst + static_cast<size_t>(done) * elem, pool + static_cast<size_t>(at) * elem,
                  static_cast<size_t>(n) * elem);
      done += n;
      at = 0;
    }
  }
  return {std::move(input), std::move(target)};
}

}  // namespace mixtrain::data
