// Datasets: MNIST-format files written here, the real Fashion-MNIST when installed, the text
// dataset's windows and splits, and the synthetic dataset's determinism.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cmath>
#include <filesystem>

#include "data/file_helpers.h"
#include "mixtrain/data/dataset.h"
#include "mixtrain/mixtrain.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
using mt::testing::error_message;
using mt::testing::idx_header;
using mt::testing::TempDir;
using mt::testing::write_bytes;
using mt::testing::write_gzip;

namespace {

bool fashion_installed() {
  return std::filesystem::exists(std::string(mt::data::kFashionMNISTDefaultDir) + "/t10k-labels-idx1-ubyte.gz");
}

// Three 28x28 images (pixel p of image i = (i * 100 + p) % 256) and labels {3, 0, 9}.
void write_small_mnist(const TempDir& dir, const std::string& prefix, bool gzip_images, bool gzip_labels) {
  std::string pixels;
  for (int i = 0; i < 3; ++i)
    for (int p = 0; p < 784; ++p) pixels += static_cast<char>((i * 100 + p) % 256);
  std::string images = idx_header(0x08, {3, 28, 28}) + pixels;
  std::string labels = idx_header(0x08, {3}) + std::string{3, 0, 9};
  const std::string ip = dir.file(prefix + "-images-idx3-ubyte"), lp = dir.file(prefix + "-labels-idx1-ubyte");
  gzip_images ? write_gzip(ip + ".gz", images) : write_bytes(ip, images);
  gzip_labels ? write_gzip(lp + ".gz", labels) : write_bytes(lp, labels);
}

}  // namespace

TEST(DatasetMNIST, ReadsFilesWithAndWithoutGz) {
  TempDir dir;
  write_small_mnist(dir, "train", /*gzip_images=*/false, /*gzip_labels=*/true);
  write_small_mnist(dir, "t10k", /*gzip_images=*/true, /*gzip_labels=*/false);
  for (mt::data::Split split : {mt::data::Split::kTrain, mt::data::Split::kTest}) {
    mt::data::MNIST ds(dir.path(), split);
    ASSERT_EQ(ds.size(), 3);
    mt::data::Example ex = ds.get(1);
    EXPECT_EQ(ex.input.shape(), (mt::Shape{1, 28, 28}));
    EXPECT_EQ(ex.input.dtype(), mt::kFloat32);
    EXPECT_EQ(ex.target.dim(), 0);
    EXPECT_EQ(ex.target.dtype(), mt::kInt64);
    EXPECT_EQ(ex.target.item<int64_t>(), 0);
    std::vector<float> px = ex.input.to_vector<float>();
    for (int p : {0, 1, 155, 783}) {
      const int byte = (100 + p) % 256;
      const float expected = static_cast<float>((byte / 255.0 - double{0.1307f}) / double{0.3081f});
      EXPECT_EQ(px[p], expected) << "pixel " << p;
    }
    const int64_t idx[] = {2, 0, 2};
    mt::data::Batch b = ds.get_batch(idx);
    EXPECT_EQ(b.input.shape(), (mt::Shape{3, 1, 28, 28}));
    EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{9, 3, 9}));
  }
  // Without normalisation the values are pixel / 255, exactly the [0, 1] range.
  mt::data::MNIST raw(dir.path(), mt::data::Split::kTrain, {.normalize = false});
  EXPECT_EQ(raw.pixel_value(0), 0.0f);
  EXPECT_EQ(raw.pixel_value(255), 1.0f);
  EXPECT_EQ(raw.get(0).input.to_vector<float>()[51], static_cast<float>(51 / 255.0));
}

TEST(DatasetMNIST, RejectsBadFilesNamingThem) {
  TempDir dir;
  write_small_mnist(dir, "train", false, false);
  // A label outside [0, 10): named with its byte offset (8-byte header + index).
  write_bytes(dir.file("train-labels-idx1-ubyte"), idx_header(0x08, {3}) + std::string{3, 10, 9});
  std::string msg = error_message([&] { mt::data::MNIST(dir.path(), mt::data::Split::kTrain); });
  EXPECT_NE(msg.find("label 10 at byte offset 9"), std::string::npos) << msg;
  // Label count differs from image count.
  write_bytes(dir.file("train-labels-idx1-ubyte"), idx_header(0x08, {2}) + std::string{3, 1});
  msg = error_message([&] { mt::data::MNIST(dir.path(), mt::data::Split::kTrain); });
  EXPECT_NE(msg.find("has 2 labels"), std::string::npos) << msg;
  // Images of the wrong size.
  write_bytes(dir.file("train-images-idx3-ubyte"), idx_header(0x08, {2, 27, 27}) + std::string(2 * 27 * 27, 'a'));
  msg = error_message([&] { mt::data::MNIST(dir.path(), mt::data::Split::kTrain); });
  EXPECT_NE(msg.find("expected uint8 images [N, 28, 28]"), std::string::npos) << msg;
  // Out-of-range index.
  write_small_mnist(dir, "t10k", false, false);
  mt::data::MNIST ok(dir.path(), mt::data::Split::kTest);
  msg = error_message([&] { ok.get(3); });
  EXPECT_NE(msg.find("index 3 is out of range"), std::string::npos) << msg;
}

TEST(DatasetFashionMNIST, MissingDirectoryAndFileMessages) {
  std::string msg = error_message([] { mt::data::FashionMNIST("/nonexistent/fmnist", mt::data::Split::kTrain); });
  EXPECT_NE(msg.find("'/nonexistent/fmnist'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("apt-get install dataset-fashion-mnist"), std::string::npos) << msg;

  TempDir dir;
  write_small_mnist(dir, "train", true, true);
  std::filesystem::remove(dir.file("train-labels-idx1-ubyte.gz"));
  msg = error_message([&] { mt::data::FashionMNIST(dir.path(), mt::data::Split::kTrain); });
  EXPECT_NE(msg.find("missing file 'train-labels-idx1-ubyte' (or 'train-labels-idx1-ubyte.gz')"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find(dir.path()), std::string::npos) << msg;
  EXPECT_NE(msg.find("apt-get install dataset-fashion-mnist"), std::string::npos) << msg;
  // MNIST has no package to suggest.
  msg = error_message([&] { mt::data::MNIST(dir.path(), mt::data::Split::kTrain); });
  EXPECT_EQ(msg.find("apt-get"), std::string::npos) << msg;
}

TEST(DatasetFashionMNIST, RealTestSplitShapesAndLabels) {
  if (!fashion_installed()) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  mt::data::FashionMNIST test_set(mt::data::kFashionMNISTDefaultDir, mt::data::Split::kTest);
  ASSERT_EQ(test_set.size(), 10000);
  mt::data::Example ex = test_set.get(0);
  EXPECT_EQ(ex.input.shape(), (mt::Shape{1, 28, 28}));
  EXPECT_EQ(ex.input.dtype(), mt::kFloat32);
  EXPECT_EQ(ex.target.item<int64_t>(), 9);
  EXPECT_EQ(mt::data::FashionMNIST::class_names()[9], "Ankle boot");
  const int64_t idx[] = {0, 1, 2, 3};
  mt::data::Batch b = test_set.get_batch(idx);
  EXPECT_EQ(b.input.shape(), (mt::Shape{4, 1, 28, 28}));
  EXPECT_EQ(b.target.dtype(), mt::kInt64);
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{9, 2, 1, 1}));
}

// Pixel statistics of the training images, computed independently (Python, from the .gz bytes):
// mean 0.286041, std 0.353024 of pixel/255. The default normalisation (0.2860, 0.3530) therefore
// gives mean 0.00012 and std 1.00007.
TEST(DatasetFashionMNIST, RealTrainNormalisationStatistics) {
  if (!fashion_installed()) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  mt::data::FashionMNIST train(mt::data::kFashionMNISTDefaultDir, mt::data::Split::kTrain);
  ASSERT_EQ(train.size(), 60000);
  EXPECT_EQ(train.get(0).target.item<int64_t>(), 9);
  // Through get_batch, in chunks, accumulating in double.
  double sum = 0, sum_sq = 0;
  int64_t n = 0;
  std::vector<int64_t> idx;
  for (int64_t start = 0; start < train.size(); start += 5000) {
    idx.clear();
    for (int64_t i = start; i < std::min<int64_t>(start + 5000, train.size()); ++i) idx.push_back(i);
    mt::data::Batch b = train.get_batch(idx);
    const float* p = b.input.data_ptr<float>();
    for (int64_t i = 0; i < b.input.numel(); ++i) {
      sum += p[i];
      sum_sq += static_cast<double>(p[i]) * p[i];
    }
    n += b.input.numel();
  }
  const double mean = sum / n, std = std::sqrt(sum_sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(std, 1.0, 0.01);
  // Tighter: the exact values above, to 1e-4.
  EXPECT_NEAR(mean, 0.000115, 1e-4);
  EXPECT_NEAR(std, 1.000069, 1e-4);
}

TEST(TextDataset, WindowsAreShiftedByOne) {
  auto ds = mt::data::TextDataset::from_string("hello world", 4);
  ASSERT_EQ(ds.size(), 7);  // 11 bytes - 4
  EXPECT_EQ(ds.vocab_size(), 256);
  mt::data::Example first = ds.get(0);
  EXPECT_EQ(first.input.dtype(), mt::kInt64);
  EXPECT_EQ(first.input.shape(), (mt::Shape{4}));
  EXPECT_EQ(mt::data::TextDataset::decode(first.input), "hell");
  EXPECT_EQ(mt::data::TextDataset::decode(first.target), "ello");
  mt::data::Example last = ds.get(6);
  EXPECT_EQ(mt::data::TextDataset::decode(last.input), "worl");
  EXPECT_EQ(mt::data::TextDataset::decode(last.target), "orld");
  const int64_t idx[] = {6, 0};
  mt::data::Batch b = ds.get_batch(idx);
  EXPECT_EQ(b.input.shape(), (mt::Shape{2, 4}));
  EXPECT_EQ(b.target.shape(), (mt::Shape{2, 4}));
  EXPECT_EQ(mt::data::TextDataset::decode(b.input), "worlhell");
  EXPECT_THROW(ds.get(7), mt::Error);
}

TEST(TextDataset, StrideAndSplitsAreDeterministicAndDisjoint) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += static_cast<char>('a' + i % 26);
  auto strided = mt::data::TextDataset::from_string(text, 10, {.stride = 10});
  EXPECT_EQ(strided.size(), 9);  // starts 0, 10, ..., 80 (81..90 + target 91 fits; 90 would need byte 100)
  EXPECT_EQ(mt::data::TextDataset::decode(strided.get(1).input), text.substr(10, 10));

  auto train = mt::data::TextDataset::from_string(text, 8, {.part = mt::data::TextPart::kTrain, .val_fraction = 0.2});
  auto val = mt::data::TextDataset::from_string(text, 8, {.part = mt::data::TextPart::kVal, .val_fraction = 0.2});
  EXPECT_EQ(train.text(), text.substr(0, 80));
  EXPECT_EQ(val.text(), text.substr(80));
  EXPECT_EQ(train.size(), 72);
  EXPECT_EQ(val.size(), 12);
  EXPECT_EQ(mt::data::TextDataset::decode(val.get(11).target), text.substr(92, 8));

  // Too short for the context: the message says how many bytes are needed.
  std::string msg = error_message(
      [&] { mt::data::TextDataset::from_string(text, 30, {.part = mt::data::TextPart::kVal, .val_fraction = 0.2}); });
  EXPECT_NE(msg.find("has 20 bytes; a context of 30 needs at least 31"), std::string::npos) << msg;
  EXPECT_THROW(mt::data::TextDataset::from_string("abc", 0), mt::Error);
}

TEST(TextDataset, ReadsFileBytesIncludingUtf8) {
  TempDir dir;
  const std::string text = "h\xc3\xa9llo, w\xc3\xb6rld\n";  // "héllo, wörld\n": 15 bytes
  write_bytes(dir.file("t.txt"), text);
  mt::data::TextDataset ds(dir.file("t.txt"), 4);
  EXPECT_EQ(ds.size(), static_cast<int64_t>(text.size()) - 4);
  std::vector<int64_t> x = ds.get(0).input.to_vector<int64_t>();
  EXPECT_EQ(x, (std::vector<int64_t>{'h', 0xc3, 0xa9, 'l'}));
  EXPECT_EQ(mt::data::TextDataset::decode(mt::data::TextDataset::encode(text)), text);

  write_bytes(dir.file("short.txt"), "abc");
  std::string msg = error_message([&] { mt::data::TextDataset(dir.file("short.txt"), 128); });
  EXPECT_NE(msg.find("short.txt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs at least 129"), std::string::npos) << msg;
  msg = error_message([&] { mt::data::TextDataset(dir.file("missing.txt"), 4); });
  EXPECT_NE(msg.find("missing.txt"), std::string::npos) << msg;
  msg = error_message([&] { mt::data::TextDataset(dir.file("t.txt"), 4, {.max_bytes = 10}); });
  EXPECT_NE(msg.find("above the limit of 10"), std::string::npos) << msg;
  EXPECT_THROW(mt::data::TextDataset::decode(mt::from_vector<int64_t>({65, 256})), mt::Error);
}

TEST(TextDataset, AFifoIsRefusedWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  EXPECT_MT_ERROR(mt::data::TextDataset(dir.file("fifo"), 4), "TextDataset", "not a regular file (a FIFO)");
}

TEST(DatasetFingerprint, TellsContentsApartAndIsStable) {
  TempDir dir;
  write_bytes(dir.file("a.txt"), "abcdefghijklmnop");
  write_bytes(dir.file("b.txt"), "abcdefghijklmnoq");  // one byte differs
  const mt::data::TextDataset a(dir.file("a.txt"), 4), a2(dir.file("a.txt"), 4), b(dir.file("b.txt"), 4);
  EXPECT_EQ(a.fingerprint(), a2.fingerprint());
  EXPECT_NE(a.fingerprint(), b.fingerprint());
  EXPECT_NE(a.fingerprint(), mt::data::TextDataset(dir.file("a.txt"), 5).fingerprint());  // other windows

  const mt::data::SyntheticDataset s1(64, {2, 3}, 4, 1), s2(64, {2, 3}, 4, 2), s3(64, {3, 2}, 4, 1);
  EXPECT_EQ(s1.fingerprint(), mt::data::SyntheticDataset(64, {2, 3}, 4, 1).fingerprint());
  EXPECT_NE(s1.fingerprint(), s2.fingerprint());
  EXPECT_NE(s1.fingerprint(), s3.fingerprint());

  // The generic fingerprint (every example through get_batch) sees a one-value difference too.
  struct Listed : mt::data::Dataset {
    std::vector<float> v;
    int64_t size() const override { return static_cast<int64_t>(v.size()); }
    mt::data::Batch get_batch(std::span<const int64_t> idx) const override {
      std::vector<float> x;
      for (int64_t i : idx) x.push_back(v[static_cast<size_t>(i)]);
      const int64_t n = static_cast<int64_t>(idx.size());
      return {mt::from_vector(x, {n}), mt::zeros({n}, {.dtype = mt::kInt64})};
    }
  };
  Listed l1, l2;
  l1.v = std::vector<float>(600, 1.0f);
  l2.v = l1.v;
  EXPECT_EQ(l1.fingerprint(), l2.fingerprint());
  l2.v[555] = 2.0f;
  EXPECT_NE(l1.fingerprint(), l2.fingerprint());
}

TEST(DatasetSynthetic, DeterministicPerExampleWhateverTheBatch) {
  mt::data::SyntheticDataset ds(1000, {3, 5, 5}, 10, /*seed=*/7);
  const int64_t ab[] = {5, 2}, b_only[] = {2};
  mt::data::Batch both = ds.get_batch(ab);
  mt::data::Batch two = ds.get_batch(b_only);
  EXPECT_EQ(both.input.shape(), (mt::Shape{2, 3, 5, 5}));
  EXPECT_EQ(both.target.dtype(), mt::kInt64);
  std::vector<float> v = both.input.to_vector<float>(), w = two.input.to_vector<float>();
  EXPECT_EQ(std::vector<float>(v.begin() + 75, v.end()), w);
  EXPECT_EQ(both.target.to_vector<int64_t>()[1], two.target.item<int64_t>());
  EXPECT_EQ(ds.get(5).input.to_vector<float>(), std::vector<float>(v.begin(), v.begin() + 75));

  EXPECT_NE(ds.get(0).input.to_vector<float>(), ds.get(1).input.to_vector<float>());
  mt::data::SyntheticDataset other(1000, {3, 5, 5}, 10, /*seed=*/8);
  EXPECT_NE(other.get(5).input.to_vector<float>(), ds.get(5).input.to_vector<float>());

  // Statistics over all examples: standard normal inputs, every class present.
  std::vector<int64_t> all(1000);
  for (int64_t i = 0; i < 1000; ++i) all[i] = i;
  mt::data::Batch b = ds.get_batch(all);
  std::vector<float> x = b.input.to_vector<float>();
  double sum = 0, sq = 0;
  for (float f : x) {
    sum += f;
    sq += static_cast<double>(f) * f;
  }
  const double mean = sum / x.size(), sd = std::sqrt(sq / x.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.02);  // 75000 samples of a 2^20-value standard-normal pool
  EXPECT_NEAR(sd, 1.0, 0.02);
  std::vector<int> count(10, 0);
  for (int64_t l : b.target.to_vector<int64_t>()) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 10);
    ++count[l];
  }
  for (int c = 0; c < 10; ++c) EXPECT_GT(count[c], 50) << "class " << c;  // expected 100 each

  mt::data::SyntheticDataset half(4, {3}, 2, 0, mt::kBFloat16);
  EXPECT_EQ(half.get(0).input.dtype(), mt::kBFloat16);
  // An example larger than the pool wraps around it.
  mt::data::SyntheticDataset big(2, {mt::data::SyntheticDataset::kPoolSize + 10}, 2);
  std::vector<float> w0 = big.get(0).input.to_vector<float>();
  EXPECT_EQ(std::vector<float>(w0.begin(), w0.begin() + 10), std::vector<float>(w0.end() - 10, w0.end()));
  EXPECT_THROW(mt::data::SyntheticDataset(4, {3}, 2, 0, mt::kInt32), mt::Error);
}
