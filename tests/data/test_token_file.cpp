// llm.c token files: windows of context + 1 tokens, the writer's bytes, and every hostile file a
// clear mt::Error (wrong magic or version, counts that lie either way, tokens outside the
// vocabulary, a FIFO, a directory).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>

#include "data/file_helpers.h"
#include "mixtrain/data/token_file.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
using mt::data::TokenFileDataset;
using mt::testing::TempDir;

namespace {

// A file in llm.c's layout with header words overridden by `patch` and `extra` bytes appended.
std::string token_file_bytes(const std::vector<uint16_t>& tokens, std::vector<std::pair<int, int32_t>> patch = {},
                             const std::string& extra = "") {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = static_cast<int32_t>(tokens.size());
  for (auto [i, v] : patch) header[i] = v;
  std::string bytes(1024 + 2 * tokens.size(), '\0');
  std::memcpy(bytes.data(), header.data(), 1024);
  std::memcpy(bytes.data() + 1024, tokens.data(), 2 * tokens.size());
  return bytes + extra;
}

std::vector<uint16_t> iota_tokens(int n) {
  std::vector<uint16_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<uint16_t>(100 + i);
  return t;
}

}  // namespace

TEST(TokenFile, WindowsAreContextPlusOneTokens) {
  TempDir dir;
  const std::vector<uint16_t> tokens = iota_tokens(21);
  TokenFileDataset::write(dir.file("t.bin"), tokens);
  EXPECT_EQ(mt::testing::read_bytes(dir.file("t.bin")), token_file_bytes(tokens));  // the writer's layout
  const TokenFileDataset d(dir.file("t.bin"), 4, 50257);
  EXPECT_EQ(d.num_tokens(), 21);
  EXPECT_EQ(d.size(), 5);  // non-overlapping windows: starts 0, 4, 8, 12, 16 (16 + 4 + 1 <= 21)
  const std::vector<int64_t> idx = {4, 0};
  const mt::data::Batch b = d.get_batch(idx);
  EXPECT_EQ(b.input.shape(), (mt::Shape{2, 4}));
  EXPECT_EQ(b.input.dtype(), mt::kInt64);
  EXPECT_EQ(b.input.to_vector<int64_t>(), (std::vector<int64_t>{116, 117, 118, 119, 100, 101, 102, 103}));
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{117, 118, 119, 120, 101, 102, 103, 104}));
  const TokenFileDataset every(dir.file("t.bin"), 4, 50257, {.stride = 1});
  EXPECT_EQ(every.size(), 17);
  EXPECT_NE(every.fingerprint(), d.fingerprint());
  EXPECT_EQ(TokenFileDataset(dir.file("t.bin"), 4, 50257).fingerprint(), d.fingerprint());
  EXPECT_MT_ERROR(d.get_batch(std::vector<int64_t>{5}), "TokenFileDataset::get_batch");
  const TokenFileDataset mem = TokenFileDataset::from_tokens(tokens, 4, 50257);
  EXPECT_EQ(mem.fingerprint(), d.fingerprint());
}

TEST(TokenFile, HostileFilesAreClearErrors) {
  TempDir dir;
  const std::vector<uint16_t> tokens = iota_tokens(10);
  auto expect_refused = [&](const std::string& bytes, std::initializer_list<std::string> parts) {
    mt::testing::write_bytes(dir.file("bad.bin"), bytes);
    mt::testing::expect_error([&] { TokenFileDataset(dir.file("bad.bin"), 4, 50257); }, parts);
  };
  expect_refused(token_file_bytes(tokens, {{0, 20240521}}), {"bad.bin", "not the magic 20240520"});
  expect_refused(token_file_bytes(tokens, {{1, 2}}), {"version 2", "uint32 tokens"});
  expect_refused(token_file_bytes(tokens, {{2, 11}}), {"declares 11 tokens", "truncated"});
  expect_refused(token_file_bytes(tokens, {{2, 9}}), {"declares 9 tokens", "trailing bytes"});
  expect_refused(token_file_bytes(tokens, {}, "x"), {"trailing bytes"});
  expect_refused(token_file_bytes(tokens, {{2, -1}}), {"declares -1 tokens"});
  expect_refused(token_file_bytes(tokens).substr(0, 1000), {"1000 bytes", "header"});
  expect_refused(token_file_bytes(iota_tokens(4)), {"holds 4 tokens", "context of 4"});
  std::vector<uint16_t> big = tokens;
  big[7] = 50257;
  expect_refused(token_file_bytes(big), {"token 50257 at position 7", "vocabulary [0, 50257)"});
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  EXPECT_MT_ERROR(TokenFileDataset(dir.file("fifo"), 4, 50257), "not a regular file");
  EXPECT_MT_ERROR(TokenFileDataset(dir.path(), 4, 50257), "TokenFileDataset");
  EXPECT_MT_ERROR(TokenFileDataset(dir.file("missing.bin"), 4, 50257), "missing.bin");
  EXPECT_MT_ERROR(TokenFileDataset::from_tokens(tokens, 4, 100), "token 100 at position 0");
  EXPECT_MT_ERROR(TokenFileDataset::from_tokens(tokens, 0, 100), "context must be at least 1");
  EXPECT_MT_ERROR(TokenFileDataset::from_tokens(tokens, 4, 70000), "vocab_size must be in [1, 65536]");
}
