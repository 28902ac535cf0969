// IDX reader: every element type, plain and gzip, and every kind of corrupt file (each error must
// name the file and the byte offset).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>

#include "data/file_helpers.h"
#include "support/expect_error.h"
#include "mixtrain/data/dataset.h"
#include "mixtrain/data/idx.h"
#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;
using mt::testing::be32;
using mt::testing::idx_header;
using mt::testing::TempDir;
using mt::testing::write_bytes;
using mt::testing::write_gzip;

namespace {

// Expects read_idx(path) to throw an mt::Error mentioning the file, "byte offset <offset>" (any
// offset when offset < 0) and `fragment`.
void expect_idx_error(const std::string& path, int64_t offset, const std::string& fragment,
                      int64_t max_bytes = mt::data::kIdxDefaultMaxBytes) {
  try {
    mt::data::read_idx(path, max_bytes);
    ADD_FAILURE() << "read_idx(" << path << ") did not throw";
  } catch (const mt::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    const std::string at = offset < 0 ? std::string("byte offset ") : "byte offset " + std::to_string(offset) + ")";
    EXPECT_NE(msg.find(at), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  }
}

}  // namespace

TEST(IdxReader, ReadsPlainUint8) {
  TempDir dir;
  std::string bytes = idx_header(0x08, {2, 3}) + std::string{0, 1, 2, 3, 4, '\xff'};
  write_bytes(dir.file("a.idx"), bytes);
  mt::Tensor t = mt::data::read_idx(dir.file("a.idx"));
  EXPECT_EQ(t.dtype(), mt::kUInt8);
  EXPECT_EQ(t.shape(), (mt::Shape{2, 3}));
  EXPECT_EQ(t.to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 2, 3, 4, 255}));
}

TEST(IdxReader, ReadsGzipDetectedByMagicNotName) {
  TempDir dir;
  std::string bytes = idx_header(0x08, {4}) + std::string{9, 8, 7, 6};
  write_gzip(dir.file("labels"), bytes);  // no .gz suffix: detection is by the 1f 8b magic
  mt::Tensor t = mt::data::read_idx(dir.file("labels"));
  EXPECT_EQ(t.shape(), (mt::Shape{4}));
  EXPECT_EQ(t.to_vector<uint8_t>(), (std::vector<uint8_t>{9, 8, 7, 6}));
}

TEST(IdxReader, ReadsEveryElementTypeBigEndian) {
  TempDir dir;
  // int8 (0x09) widens to int32, sign kept.
  write_bytes(dir.file("i8"), idx_header(0x09, {3}) + std::string{'\x80', '\xff', '\x7f'});
  EXPECT_EQ(mt::data::read_idx(dir.file("i8")).to_vector<int32_t>(), (std::vector<int32_t>{-128, -1, 127}));
  // int16 (0x0B): big-endian 0x8000, 0x0102.
  write_bytes(dir.file("i16"), idx_header(0x0B, {2}) + std::string{'\x80', '\x00', '\x01', '\x02'});
  mt::Tensor i16 = mt::data::read_idx(dir.file("i16"));
  EXPECT_EQ(i16.dtype(), mt::kInt32);
  EXPECT_EQ(i16.to_vector<int32_t>(), (std::vector<int32_t>{-32768, 258}));
  // int32 (0x0C).
  write_bytes(dir.file("i32"), idx_header(0x0C, {2}) + be32(0x01020304u) + be32(0xFFFFFFFEu));
  EXPECT_EQ(mt::data::read_idx(dir.file("i32")).to_vector<int32_t>(), (std::vector<int32_t>{16909060, -2}));
  // float32 (0x0D): 1.5 = 0x3FC00000, -2 = 0xC0000000.
  write_bytes(dir.file("f32"), idx_header(0x0D, {1, 2}) + be32(0x3FC00000u) + be32(0xC0000000u));
  mt::Tensor f32 = mt::data::read_idx(dir.file("f32"));
  EXPECT_EQ(f32.dtype(), mt::kFloat32);
  EXPECT_EQ(f32.shape(), (mt::Shape{1, 2}));
  EXPECT_EQ(f32.to_vector<float>(), (std::vector<float>{1.5f, -2.0f}));
  // float64 (0x0E): 0.1 = 0x3FB999999999999A.
  write_bytes(dir.file("f64"), idx_header(0x0E, {1}) + be32(0x3FB99999u) + be32(0x9999999Au));
  mt::Tensor f64 = mt::data::read_idx(dir.file("f64"));
  EXPECT_EQ(f64.dtype(), mt::kFloat64);
  EXPECT_EQ(f64.item<double>(), 0.1);
}

TEST(IdxReader, EmptyDimensionGivesEmptyTensor) {
  TempDir dir;
  write_bytes(dir.file("e"), idx_header(0x08, {0, 28, 28}));
  mt::Tensor t = mt::data::read_idx(dir.file("e"));
  EXPECT_EQ(t.shape(), (mt::Shape{0, 28, 28}));
  EXPECT_EQ(t.numel(), 0);
}

TEST(IdxReader, BadMagicTypeAndDims) {
  TempDir dir;
  write_bytes(dir.file("magic"), std::string{1, 0, 8, 1} + be32(1) + "x");
  expect_idx_error(dir.file("magic"), 0, "bad magic 01 00 08 01");
  write_bytes(dir.file("type"), std::string{0, 0, 7, 1} + be32(1) + "x");
  expect_idx_error(dir.file("type"), 2, "unknown element type 0x07");
  write_bytes(dir.file("ndims0"), std::string{0, 0, 8, 0});
  expect_idx_error(dir.file("ndims0"), 3, "number of dimensions 0");
  write_bytes(dir.file("ndims9"), idx_header(0x08, {1, 1, 1, 1, 1, 1, 1, 1, 1}) + "x");
  expect_idx_error(dir.file("ndims9"), 3, "number of dimensions 9");
  write_bytes(dir.file("short"), std::string{0, 0});
  expect_idx_error(dir.file("short"), 2, "inside the 4-byte IDX magic");
  write_bytes(dir.file("dims"), std::string{0, 0, 8, 2} + be32(5) + std::string{0, 0});
  expect_idx_error(dir.file("dims"), 10, "inside dimension 1 of 2");
}

TEST(IdxReader, AbsurdDimensionsAreRefusedBeforeAllocating) {
  TempDir dir;
  // 65536^3 bytes overflows any sane limit at the second dimension (offset 8).
  write_bytes(dir.file("huge"), idx_header(0x08, {65536, 65536, 65536}));
  expect_idx_error(dir.file("huge"), 8, "larger than the limit");
  // One dimension of 2^32-1 float64 elements is over the limit by itself: refused at dimension 0.
  write_bytes(dir.file("max"), idx_header(0x0E, {0xFFFFFFFFu, 0xFFFFFFFFu}));
  expect_idx_error(dir.file("max"), 4, "larger than the limit");
  // A caller-chosen limit.
  write_bytes(dir.file("limit"), idx_header(0x08, {1000}) + std::string(1000, 'a'));
  expect_idx_error(dir.file("limit"), 4, "limit of 100 bytes", 100);
  EXPECT_EQ(mt::data::read_idx(dir.file("limit"), 1000).numel(), 1000);
}

TEST(IdxReader, TruncatedAndTrailingPlain) {
  TempDir dir;
  write_bytes(dir.file("trunc"), idx_header(0x08, {10}) + std::string(5, 'a'));
  expect_idx_error(dir.file("trunc"), 13, "truncated");
  write_bytes(dir.file("trail"), idx_header(0x08, {3}) + std::string(4, 'a'));
  expect_idx_error(dir.file("trail"), 11, "trailing bytes");
  // Truncated float32 data: the 2nd element is cut after 2 of its 4 bytes.
  write_bytes(dir.file("f32"), idx_header(0x0D, {2}) + be32(0) + std::string{1, 2});
  expect_idx_error(dir.file("f32"), 14, "truncated");
}

TEST(IdxReader, TruncatedAndTrailingGzip) {
  TempDir dir;
  write_gzip(dir.file("trunc.gz"), idx_header(0x08, {10}) + std::string(5, 'a'));
  expect_idx_error(dir.file("trunc.gz"), 13, "truncated");
  write_gzip(dir.file("trail.gz"), idx_header(0x08, {3}) + std::string(4, 'a'));
  expect_idx_error(dir.file("trail.gz"), 11, "trailing bytes");
  write_gzip(dir.file("magic.gz"), std::string{'\x1f', '\x8b', 8, 1});
  expect_idx_error(dir.file("magic.gz"), 0, "bad magic 1f 8b 08 01");
}

TEST(IdxReader, CorruptOrCutGzipStream) {
  TempDir dir;
  std::string payload(4000, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>((i * 7919) % 251);
  write_gzip(dir.file("ok.gz"), idx_header(0x08, {4000}) + payload);
  std::string gz = mt::testing::read_bytes(dir.file("ok.gz"));
  ASSERT_EQ(mt::data::read_idx(dir.file("ok.gz")).numel(), 4000);

  // zlib decompresses ahead of the reader, so a gzip-level error is reported at the reader's
  // position when zlib detected it, not necessarily where the damage is.
  // Cut the compressed stream in half: zlib reports an unexpected end of the gzip stream.
  write_bytes(dir.file("cut.gz"), gz.substr(0, gz.size() / 2));
  expect_idx_error(dir.file("cut.gz"), -1, "gzip stream");
  // Damage the CRC trailer (the last 8 bytes are CRC32 and length).
  std::string bad_crc = gz;
  bad_crc[bad_crc.size() - 6] ^= 0x5a;
  write_bytes(dir.file("crc.gz"), bad_crc);
  expect_idx_error(dir.file("crc.gz"), -1, "gzip stream");
  // Damage the deflate data itself.
  std::string bad_data = gz;
  bad_data[gz.size() / 2] ^= 0xff;
  bad_data[gz.size() / 2 + 1] ^= 0xff;
  write_bytes(dir.file("data.gz"), bad_data);
  EXPECT_THROW(mt::data::read_idx(dir.file("data.gz")), mt::Error);
}

TEST(IdxReader, GzipMembersAndTrailingGarbage) {
  TempDir dir;
  const std::string whole = idx_header(0x08, {6}) + "abcdef";
  write_gzip(dir.file("one.gz"), whole);
  const std::string gz = mt::testing::read_bytes(dir.file("one.gz"));
  // Garbage after the gzip member used to be ignored by zlib's gzread.
  write_bytes(dir.file("garbage.gz"), gz + "not gzip");
  const std::string msg = mt::testing::error_message([&] { mt::data::read_idx(dir.file("garbage.gz")); });
  EXPECT_NE(msg.find("trailing bytes after the gzip stream"), std::string::npos) << msg;
  EXPECT_NE(msg.find("compressed byte offset " + std::to_string(gz.size())), std::string::npos) << msg;
  // Two members (`cat a.gz b.gz`) are one valid stream.
  write_gzip(dir.file("head.gz"), whole.substr(0, 10));
  write_gzip(dir.file("tail.gz"), whole.substr(10));
  write_bytes(dir.file("two.gz"), mt::testing::read_bytes(dir.file("head.gz")) + mt::testing::read_bytes(dir.file("tail.gz")));
  EXPECT_EQ(mt::data::read_idx(dir.file("two.gz")).to_vector<uint8_t>(), (std::vector<uint8_t>{'a', 'b', 'c', 'd', 'e', 'f'}));
  // A cut stream names the compressed offset where it ends, not byte 0.
  write_bytes(dir.file("cut.gz"), gz.substr(0, gz.size() - 4));
  const std::string cut = mt::testing::error_message([&] { mt::data::read_idx(dir.file("cut.gz")); });
  EXPECT_NE(cut.find("compressed byte offset " + std::to_string(gz.size() - 4)), std::string::npos) << cut;
}

TEST(IdxReader, AFifoIsRefusedWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  EXPECT_MT_ERROR(mt::data::read_idx(dir.file("fifo")), "read_idx", "not a regular file (a FIFO)");
}

TEST(IdxReader, MissingFileNamesIt) {
  try {
    mt::data::read_idx("/nonexistent/mixtrain/file-idx1-ubyte");
    ADD_FAILURE() << "no error";
  } catch (const mt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/mixtrain/file-idx1-ubyte"), std::string::npos);
  }
}

// The real Fashion-MNIST test labels (Debian's dataset-fashion-mnist). Facts checked independently
// with Python's gzip module: 10000 labels, each of the 10 classes exactly 1000 times, the first ten
// are 9 2 1 1 6 1 4 6 5 7 (9 = ankle boot).
TEST(IdxReader, RealFashionMNISTTestLabels) {
  const std::string path = std::string(mt::data::kFashionMNISTDefaultDir) + "/t10k-labels-idx1-ubyte.gz";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not installed (apt-get install dataset-fashion-mnist)";
  mt::Tensor labels = mt::data::read_idx(path);
  ASSERT_EQ(labels.dtype(), mt::kUInt8);
  ASSERT_EQ(labels.shape(), (mt::Shape{10000}));
  std::vector<uint8_t> v = labels.to_vector<uint8_t>();
  EXPECT_EQ(std::vector<uint8_t>(v.begin(), v.begin() + 10), (std::vector<uint8_t>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7}));
  std::vector<int> count(10, 0);
  for (uint8_t l : v) {
    ASSERT_LT(l, 10);
    ++count[l];
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(count[c], 1000) << "class " << c;

  mt::Tensor images = mt::data::read_idx(std::string(mt::data::kFashionMNISTDefaultDir) + "/t10k-images-idx3-ubyte.gz");
  EXPECT_EQ(images.dtype(), mt::kUInt8);
  EXPECT_EQ(images.shape(), (mt::Shape{10000, 28, 28}));
}
