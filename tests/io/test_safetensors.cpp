// safetensors: bit-exact round trips of every dtype, byte-level conformance with the reference
// implementation's own test vectors, hostile files, and the atomic write.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "data/file_helpers.h"
#include "mixtrain/io/safetensors.h"
#include "mixtrain/mixtrain.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
using mt::testing::FileSizeLimit;
using mt::testing::read_bytes;
using mt::testing::TempDir;
using mt::testing::write_bytes;

namespace {

// A tensor of `shape` and `dtype` whose bytes are a fixed pseudo-random pattern (for floats this
// includes NaN, infinity and subnormal bit patterns: the round trip must keep them bit for bit).
mt::Tensor pattern(const mt::Shape& shape, mt::DType dtype, uint32_t salt) {
  mt::Tensor t = mt::Tensor::empty(shape, dtype);
  auto* p = static_cast<unsigned char*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>((i * 2654435761u + salt) >> 7);
  if (dtype == mt::kBool)
    for (size_t i = 0; i < t.nbytes(); ++i) p[i] &= 1;
  return t;
}

bool same_bytes(const mt::Tensor& a, const mt::Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.to(mt::Device{}).contiguous().raw_data(), b.to(mt::Device{}).contiguous().raw_data(), a.nbytes()) == 0;
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A file from a header text (padded as given) and raw data bytes.
std::string make_file(const TempDir& dir, const std::string& name, const std::string& header, const std::string& data) {
  write_bytes(dir.file(name), le64(header.size()) + header + data);
  return dir.file(name);
}

// Expects load_safetensors and read_safetensors_header to throw mt::Error naming the file, with a
// byte offset, and `fragment`.
void expect_bad(const std::string& path, const std::string& fragment, int64_t offset = -1) {
  for (int which = 0; which < 2; ++which) {
    try {
      if (which == 0)
        mt::io::load_safetensors(path);
      else
        mt::io::read_safetensors_header(path);
      ADD_FAILURE() << path << ": no error (expected '" << fragment << "')";
    } catch (const mt::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(offset < 0 ? std::string("byte offset ") : "byte offset " + std::to_string(offset) + ")"),
                std::string::npos)
          << msg;
      EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
    }
  }
}

}  // namespace

TEST(Safetensors, RoundTripEveryDtypeBitExact) {
  TempDir dir;
  const mt::DType all[] = {mt::kFloat32, mt::kFloat16, mt::kBFloat16, mt::kFloat64,
                           mt::kInt64,   mt::kInt32,   mt::kUInt8,    mt::kBool};
  mt::io::NamedTensors tensors;
  uint32_t salt = 1;
  for (mt::DType dt : all) {
    const std::string n(mt::to_string(dt));
    tensors.emplace_back(n + ".matrix", pattern({3, 5}, dt, salt++));
    tensors.emplace_back(n + ".scalar", pattern({}, dt, salt++));     // 0-dim: shape []
    tensors.emplace_back(n + ".empty", pattern({0, 4}, dt, salt++));  // no bytes
    tensors.emplace_back(n + ".rank4", pattern({2, 1, 3, 2}, dt, salt++));
  }
  const mt::io::Metadata meta = {{"format", "pt"}, {"quote\"and\\slash", "line\nbreak \xc3\xa9"}, {"empty", ""}};
  mt::io::save_safetensors(dir.file("all.safetensors"), tensors, meta);

  mt::io::SafetensorsFile f = mt::io::load_safetensors(dir.file("all.safetensors"));
  EXPECT_EQ(f.metadata, meta);
  ASSERT_EQ(f.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(f.tensors.count(name)) << name;
    EXPECT_TRUE(same_bytes(f.tensors.at(name), t)) << name;
  }
  EXPECT_EQ(f.tensors.at("float32.scalar").dim(), 0);
  EXPECT_EQ(f.tensors.at("int64.empty").shape(), (mt::Shape{0, 4}));
  // Saving what was loaded gives the same file, byte for byte (the writer is deterministic).
  mt::io::save_safetensors(dir.file("again.safetensors"), f.tensors, f.metadata);
  EXPECT_EQ(read_bytes(dir.file("again.safetensors")), read_bytes(dir.file("all.safetensors")));
}

TEST(Safetensors, NonContiguousTensorsAreWrittenContiguous) {
  TempDir dir;
  mt::Tensor a = mt::arange(0.0, 6.0, 1.0, {.dtype = mt::kFloat32}).reshape({2, 3});
  mt::io::save_safetensors(dir.file("t.safetensors"), {{"at", a.t()}});
  mt::Tensor back = mt::io::load_safetensors(dir.file("t.safetensors")).tensors.at("at");
  EXPECT_EQ(back.shape(), (mt::Shape{3, 2}));
  EXPECT_EQ(back.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

// Byte strings from the reference implementation's serialization tests (huggingface/safetensors,
// safetensors/src/tensor.rs: test_serialization, test_empty, test_serialization_forced_alignement).
TEST(Safetensors, BytesMatchTheReferenceImplementation) {
  TempDir dir;
  const std::string data = std::string("\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40", 12) +
                           std::string("\x00\x00\x40\x40\x00\x00\x80\x40\x00\x00\xa0\x40", 12);  // 0..5 as f32
  mt::Tensor t = mt::arange(0.0, 6.0, 1.0, {.dtype = mt::kFloat32});

  mt::io::save_safetensors(dir.file("a"), {{"attn.0", t.reshape({1, 2, 3})}});
  const std::string json1 = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(json1.size(), 64u);  // already a multiple of 8: no padding
  EXPECT_EQ(read_bytes(dir.file("a")), std::string("\x40\0\0\0\0\0\0\0", 8) + json1 + data);

  mt::io::save_safetensors(dir.file("b"), {{"attn0", t.reshape({1, 1, 2, 3})}});
  const std::string json2 = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(json2.size(), 65u);  // padded with 7 spaces to 72
  EXPECT_EQ(read_bytes(dir.file("b")), std::string("\x48\0\0\0\0\0\0\0", 8) + json2 + "       " + data);

  mt::io::save_safetensors(dir.file("c"), mt::io::NamedTensors{});
  EXPECT_EQ(read_bytes(dir.file("c")), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));

  mt::io::save_safetensors(dir.file("d"), mt::io::NamedTensors{}, {{"framework", "pt"}});
  EXPECT_EQ(read_bytes(dir.file("d")),
            std::string("\x28\0\0\0\0\0\0\0", 8) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
}

TEST(Safetensors, WritesByDescendingAlignmentThenName) {
  TempDir dir;
  mt::io::save_safetensors(dir.file("o"), {{"b_u8", mt::zeros({3}, {.dtype = mt::kUInt8})},
                                           {"a_f32", mt::zeros({2}, {.dtype = mt::kFloat32})},
                                           {"c_f32", mt::zeros({1}, {.dtype = mt::kFloat32})},
                                           {"z_i64", mt::zeros({1}, {.dtype = mt::kInt64})},
                                           {"y_f64", mt::zeros({1}, {.dtype = mt::kFloat64})},
                                           {"h_f16", mt::zeros({1}, {.dtype = mt::kFloat16})},
                                           {"flag", mt::zeros({2}, {.dtype = mt::kBool})}});
  mt::io::SafetensorsHeader h = mt::io::read_safetensors_header(dir.file("o"));
  std::vector<std::string> names;
  for (const auto& e : h.tensors) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"z_i64", "y_f64", "a_f32", "c_f32", "h_f16", "b_u8", "flag"}));
  // Every tensor starts at a multiple of its element size in the file.
  for (const auto& e : h.tensors) EXPECT_EQ((h.data_start + e.begin) % mt::element_size(e.dtype), 0u) << e.name;
  EXPECT_EQ(h.data_start % 8, 0u);
  EXPECT_EQ(h.data_start, 8 + h.header_bytes);
  EXPECT_EQ(h.file_bytes, h.data_start + 8 + 8 + 8 + 4 + 2 + 3 + 2);
  EXPECT_EQ(h.tensors[2].shape, (mt::Shape{2}));
  EXPECT_EQ(h.tensors[2].dtype, mt::kFloat32);
  EXPECT_EQ(h.tensors[2].begin, 16u);
  EXPECT_EQ(h.tensors[2].end, 24u);
}

TEST(Safetensors, RejectsBadNamesOnSave) {
  TempDir dir;
  mt::Tensor t = mt::zeros({1});
  EXPECT_THROW(mt::io::save_safetensors(dir.file("x"), {{"a", t}, {"a", t}}), mt::Error);
  EXPECT_THROW(mt::io::save_safetensors(dir.file("x"), {{"", t}}), mt::Error);
  EXPECT_THROW(mt::io::save_safetensors(dir.file("x"), {{"__metadata__", t}}), mt::Error);
  EXPECT_THROW(mt::io::save_safetensors(dir.file("x"), {{"bad\xff", t}}), mt::Error);  // not UTF-8
  EXPECT_THROW(mt::io::save_safetensors(dir.file("x"), {{"u", mt::Tensor()}}), mt::Error);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});  // nothing written, no temporary left
}

TEST(Safetensors, HostileHeaders) {
  TempDir dir;
  const std::string f32x2 = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";
  write_bytes(dir.file("tiny"), "abc");
  expect_bad(dir.file("tiny"), "too short for the 8-byte header length", 3);
  write_bytes(dir.file("long"), le64(1000) + "{}");
  expect_bad(dir.file("long"), "runs past the end of the file", 0);
  write_bytes(dir.file("huge"), le64(uint64_t{1} << 40) + "{}");
  expect_bad(dir.file("huge"), "exceeds the limit of 100000000 bytes", 0);
  write_bytes(dir.file("max"), le64(~uint64_t{0}) + "{}");
  expect_bad(dir.file("max"), "exceeds the limit", 0);
  // JSON syntax error at the 'x', JSON position 6 (0-based): file offset 8 + 6.
  make_file(dir, "json", R"({"a":{x}})", "");
  expect_bad(dir.file("json"), "JSON header: invalid JSON", 14);
  make_file(dir, "notobj", "[1,2]   ", "");
  expect_bad(dir.file("notobj"), "not an object", 8);
  make_file(dir, "dtype", R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", "ab");
  expect_bad(dir.file("dtype"), "unsupported dtype \"F8_E4M3\"", 9);  // points at the key "a"
  make_file(dir, "nodtype", R"({"a":{"shape":[2],"data_offsets":[0,2]}})", "ab");
  expect_bad(dir.file("nodtype"), "missing dtype");
  make_file(dir, "negdim", R"({"a":{"dtype":"U8","shape":[-2],"data_offsets":[0,2]}})", "ab");
  expect_bad(dir.file("negdim"), "non-negative integers");
  make_file(dir, "floatdim", R"({"a":{"dtype":"U8","shape":[2.0],"data_offsets":[0,2]}})", "ab");
  expect_bad(dir.file("floatdim"), "non-negative integers");
  make_file(dir, "ndim", R"({"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})", "a");
  expect_bad(dir.file("ndim"), "at most 8");
  make_file(dir, "offs", R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0]}})", "ab");
  expect_bad(dir.file("offs"), "data_offsets must be two");
  make_file(dir, "dup", "{\"a\":{" + f32x2 + "},\"a\":{" + f32x2 + "}}", std::string(8, 'x'));
  expect_bad(dir.file("dup"), "duplicate key \"a\"");
  // Duplicates inside an entry and in the metadata: parsers disagree on which one wins.
  make_file(dir, "dupfield", R"({"a":{"dtype":"U8","dtype":"F32","shape":[2],"data_offsets":[0,2]}})", "ab");
  expect_bad(dir.file("dupfield"), "duplicate key \"dtype\"");
  make_file(dir, "dupmeta", R"({"__metadata__":{"k":"1","k":"2"}})", "");
  expect_bad(dir.file("dupmeta"), "duplicate key \"k\"");
  // A name with a newline and an escape sequence is quoted and escaped in the message.
  make_file(dir, "ctrl", "{\"x\\ny\\u001b[31m\":{\"dtype\":\"Q\",\"shape\":[],\"data_offsets\":[0,0]}}", "");
  expect_bad(dir.file("ctrl"), "tensor \"x\\ny\\x1b[31m\"");
  make_file(dir, "deep", R"({"a":{"dtype":"U8","shape":[[1]],"data_offsets":[0,1]}})", "a");
  expect_bad(dir.file("deep"), "nests deeper");
  make_file(dir, "meta", R"({"__metadata__":{"k":1}})", "");
  expect_bad(dir.file("meta"), "is not a string");
  make_file(dir, "utf8", "{\"\xff\":{" + f32x2 + "}}", std::string(8, 'x'));
  expect_bad(dir.file("utf8"), "JSON header: invalid JSON");
  // Numbers past double's range: nlohmann reports them as out_of_range, not parse_error.
  make_file(dir, "overflow", R"({"a":{"dtype":"U8","shape":[211111E1111111],"data_offsets":[0,1]}})", "a");
  expect_bad(dir.file("overflow"), "JSON header: invalid JSON: number overflow parsing '211111E1111111'");
  make_file(dir, "overflowmeta", R"({"__metadata__":{"k":-1e400}})", "");
  expect_bad(dir.file("overflowmeta"), "JSON header: invalid JSON: number overflow");
}

TEST(Safetensors, HostileOffsets) {
  TempDir dir;
  // Shape [2] F32 needs 8 bytes; offsets span 4.
  std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})";
  make_file(dir, "mismatch", h, "abcd");
  expect_bad(dir.file("mismatch"), "needs 8 bytes, but data_offsets [0, 4] span 4", 8 + h.size());
  // Offsets past the data section (a truncated file).
  h = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  make_file(dir, "trunc", h, "abcdefgh");
  expect_bad(dir.file("trunc"), "past the end of the data section (8 bytes)");
  // Reversed.
  make_file(dir, "rev", R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", "abcd");
  expect_bad(dir.file("rev"), "reversed");
  // Overlap: b starts inside a.
  h = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})";
  h.append((8 - h.size() % 8) % 8, ' ');
  make_file(dir, "overlap", h, "abcdef");
  expect_bad(dir.file("overlap"), "overlaps tensor \"a\"", 8 + h.size() + 2);
  // Gap between tensors.
  h = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})";
  make_file(dir, "gap", h, "abcde");
  expect_bad(dir.file("gap"), "gap of 1 unused bytes before tensor \"b\"", 8 + h.size() + 2);
  // Trailing bytes after the last tensor.
  h = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  make_file(dir, "trail", h, "abcde");
  expect_bad(dir.file("trail"), "3 trailing bytes", 8 + h.size() + 2);
  // A shape whose element count overflows 64 bits, and one that holds nothing but whose strides would
  // (a zero dim does not make [2^62, 2^62] addressable).
  h = R"({"a":{"dtype":"F64","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})";
  make_file(dir, "overflow", h, "abcdefgh");
  expect_bad(dir.file("overflow"), "more elements than a 64-bit index can address");
  h = R"({"a":{"dtype":"U8","shape":[4611686018427387904,4611686018427387904,0],"data_offsets":[0,0]}})";
  make_file(dir, "zero_overflow", h, "");
  expect_bad(dir.file("zero_overflow"), "more elements than a 64-bit index can address");
  // Byte size above 2^64 with an addressable element count.
  h = R"({"a":{"dtype":"F64","shape":[4294967296,536870912],"data_offsets":[0,8]}})";
  make_file(dir, "bytes_overflow", h, "abcdefgh");
  expect_bad(dir.file("bytes_overflow"), "needs over 2^64 bytes");
  // BOOL bytes other than 0/1, at the exact file offset.
  h = R"({"a":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})";
  make_file(dir, "bool", h, std::string("\x01\x00\x02", 3));
  try {
    mt::io::load_safetensors(dir.file("bool"));
    ADD_FAILURE() << "no error";
  } catch (const mt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("byte offset " + std::to_string(8 + h.size() + 2) + ")"), std::string::npos)
        << e.what();
  }
  // A valid hand-written file with two tensors in reverse name order and an empty one: accepted.
  h = R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"e":{"dtype":"I32","shape":[0],"data_offsets":[2,2]},)"
      R"("a":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}})";
  make_file(dir, "ok", h, "xyz");
  mt::io::SafetensorsFile ok = mt::io::load_safetensors(dir.file("ok"));
  EXPECT_EQ(ok.tensors.at("a").to_vector<uint8_t>(), (std::vector<uint8_t>{'z'}));
  EXPECT_EQ(ok.tensors.at("b").to_vector<uint8_t>(), (std::vector<uint8_t>{'x', 'y'}));
  EXPECT_EQ(ok.tensors.at("e").numel(), 0);
}

TEST(Safetensors, FailedSaveLeavesThePreviousFileIntact) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  mt::io::save_safetensors(path, {{"w", mt::ones({4})}});
  const std::string before = read_bytes(path);

  // 1. The directory does not exist.
  EXPECT_THROW(mt::io::save_safetensors(dir.file("no/such/dir/w.safetensors"), {{"w", mt::ones({4})}}), mt::Error);

  // 2. The disk "fills up" mid-write: a 4 KiB file size limit makes write() fail with EFBIG while
  // the 64 KiB tensor is being written (SIGXFSZ ignored so that the process survives).
  mt::testing::Caught caught;
  {
    const FileSizeLimit limit(4096);
    ASSERT_TRUE(limit.ok());
    caught = mt::testing::catch_error([&] { mt::io::save_safetensors(path, {{"w", mt::zeros({16384})}}); });
  }
  const std::string& msg = caught.message;
  EXPECT_TRUE(caught.is_mt_error) << msg;
  EXPECT_NE(msg.find("write failed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unchanged"), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(path), before);

  // 3. The rename fails: the target is a directory.
  std::filesystem::create_directory(dir.file("adir"));
  EXPECT_THROW(mt::io::save_safetensors(dir.file("adir"), {{"w", mt::ones({4})}}), mt::Error);
  EXPECT_TRUE(std::filesystem::is_directory(dir.file("adir")));

  // No temporary file is left behind, and the old file still loads.
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"adir", "w.safetensors"}));
  EXPECT_EQ(mt::io::load_safetensors(path).tensors.at("w").to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));

  // A successful save replaces the file.
  mt::io::save_safetensors(path, {{"w", mt::full({2}, 3.0)}});
  EXPECT_EQ(mt::io::load_safetensors(path).tensors.at("w").to_vector<float>(), (std::vector<float>{3, 3}));
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"adir", "w.safetensors"}));
}
