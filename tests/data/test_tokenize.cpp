// tokenize_files and TokenFileWriter: the streaming, parallel tokenization of text files into llm.c
// token files gives the same tokens for any thread count and block size as encoding each file at
// once; the validation split; nothing left behind on an error.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <random>

#include "data/file_helpers.h"
#include "mixtrain/data/token_file.h"
#include "mixtrain/data/tokenize.h"
#include "support/expect_error.h"
#include "text/tokenizer_fixture.h"

namespace mt = mixtrain;
using mt::data::TokenFileDataset;
using mt::data::TokenFileWriter;
using mt::data::TokenizeOptions;
using mt::testing::TempDir;
using mt::text::TokenId;
using mt::text::Tokenizer;

namespace {

std::vector<uint16_t> read_tokens(const std::string& path) {
  return TokenFileDataset(path, 1, 65536).tokens();
}

// Text with spaces and newlines, stretches without any safe cut (long words, runs of spaces, CJK,
// invalid bytes) and "<|endoftext|>" as text.
std::string document(std::mt19937& rng, size_t bytes) {
  static const std::vector<std::string> atoms = {"the", " the", " world", "  ", "\n", "\n\n", " a", "x", "'s", "123",
                                                 "\xE4\xBD\xA0", "\xFF", " ", ".", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                                                 "<|endoftext|>", "\t", "q y", "r\nz"};
  std::uniform_int_distribution<size_t> pick(0, atoms.size() - 1);
  std::string s;
  while (s.size() < bytes) s += atoms[pick(rng)];
  return s;
}

class Tokenize : public ::testing::Test {
 protected:
  mt::testing::BpeFixture fx;
  TempDir dir;
  std::vector<std::string> inputs, texts;
  std::optional<Tokenizer> tok;

  void SetUp() override {
    tok = Tokenizer::load(fx.write_tiktoken(dir));
    std::mt19937 rng(1);
    for (size_t size : {size_t{30000}, size_t{0}, size_t{5000}, size_t{70000}}) {
      texts.push_back(document(rng, size));
      inputs.push_back(dir.file("in" + std::to_string(inputs.size()) + ".txt"));
      mt::testing::write_bytes(inputs.back(), texts.back());
    }
  }
  // Each file encoded at once, after <|endoftext|>.
  std::vector<uint16_t> expected() const {
    std::vector<uint16_t> out;
    for (const std::string& t : texts) {
      out.push_back(static_cast<uint16_t>(fx.eot));
      for (TokenId id : tok->encode(t)) out.push_back(static_cast<uint16_t>(id));
    }
    return out;
  }
};

}  // namespace

TEST(TokenFileWriter, WritesTheFormatAndRefusesWideIds) {
  TempDir dir;
  const std::string path = dir.file("t.bin");
  {
    TokenFileWriter w(path);
    w.append(std::vector<uint32_t>{1, 2, 65535});
    w.append(std::vector<uint16_t>{7});
    EXPECT_EQ(w.count(), 4);
    w.finish();
    EXPECT_MT_ERROR(w.append(std::vector<uint32_t>{1}), "already finished");
  }
  EXPECT_EQ(read_tokens(path), (std::vector<uint16_t>{1, 2, 65535, 7}));
  const std::string bytes = mt::testing::read_bytes(path);
  ASSERT_EQ(bytes.size(), 1024u + 8u);
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof header);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 4);
  {
    TokenFileWriter w(dir.file("wide.bin"));
    EXPECT_MT_ERROR(w.append(std::vector<uint32_t>{5, 65536}), "wide.bin", "token 65536 (position 1)", "uint16");
  }  // unfinished: nothing stays
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"t.bin"});
}

TEST_F(Tokenize, SameTokensForAnyThreadsAndBlockSize) {
  const std::vector<uint16_t> want = expected();
  for (int threads : {1, 4})
    for (uint64_t block : {uint64_t{1}, uint64_t{7}, uint64_t{1000}, uint64_t{1} << 20}) {
      const std::string out = dir.file("train.bin");
      const auto r = mt::data::tokenize_files(*tok, inputs, out, "", {.threads = threads, .block_bytes = block});
      ASSERT_EQ(read_tokens(out), want) << threads << " threads, blocks of " << block;
      EXPECT_EQ(r.train_tokens, static_cast<int64_t>(want.size()));
      EXPECT_EQ(r.val_tokens, 0);
      EXPECT_EQ(r.documents, 4);
      EXPECT_EQ(r.bytes, 105000u + texts[0].size() - 30000 + texts[2].size() - 5000 + texts[3].size() - 70000);
    }
}

TEST_F(Tokenize, ValidationSplitIsAPrefixCutSafely) {
  const std::vector<uint16_t> want = expected();
  std::vector<uint16_t> first_val;
  for (int threads : {1, 3})
    for (uint64_t block : {uint64_t{5}, uint64_t{4096}}) {
      const auto r = mt::data::tokenize_files(*tok, inputs, dir.file("train.bin"), dir.file("val.bin"),
                                              {.val_fraction = 0.25, .threads = threads, .block_bytes = block});
      std::vector<uint16_t> val = read_tokens(dir.file("val.bin")), train = read_tokens(dir.file("train.bin"));
      EXPECT_EQ(r.val_tokens, static_cast<int64_t>(val.size()));
      std::vector<uint16_t> all = val;
      all.insert(all.end(), train.begin(), train.end());
      ASSERT_EQ(all, want);
      // About a quarter of the bytes (the cut is the last safe place before the 26250th byte).
      std::vector<TokenId> ids(val.begin(), val.end());
      const size_t val_bytes = tok->decode(ids).size() - std::string("<|endoftext|>").size();
      EXPECT_LE(val_bytes, 26250u);
      EXPECT_GT(val_bytes, 26000u);
      if (first_val.empty()) first_val = val;
      EXPECT_EQ(val, first_val);
    }
}

TEST_F(Tokenize, ProgressAndFailuresLeaveNothingBehind) {
  std::vector<uint64_t> seen;
  const uint64_t total = 30000 + 5000 + 70000 + (texts[0].size() - 30000) + (texts[2].size() - 5000) + (texts[3].size() - 70000);
  mt::data::tokenize_files(*tok, inputs, dir.file("train.bin"), "",
                           {.threads = 2, .block_bytes = 4096, .progress = [&](uint64_t done, uint64_t all) {
                              EXPECT_EQ(all, total);
                              seen.push_back(done);
                            }});
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(seen.back(), total);
  std::filesystem::remove(dir.file("train.bin"));
  const auto before = dir.entries();
  // A failure midway (here the progress callback's) removes both temporaries.
  EXPECT_MT_ERROR(mt::data::tokenize_files(*tok, inputs, dir.file("train.bin"), dir.file("val.bin"),
                                           {.val_fraction = 0.1, .threads = 2, .block_bytes = 4096,
                                            .progress = [](uint64_t, uint64_t) { MT_FAIL("stop here"); }}),
                  "stop here");
  EXPECT_EQ(dir.entries(), before);
  // Inputs must be regular files; checked before anything is written.
  const std::string fifo = dir.file("fifo.txt");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::vector<std::string> bad = {inputs[0], fifo};
  EXPECT_MT_ERROR(mt::data::tokenize_files(*tok, bad, dir.file("train.bin"), "", {}), "fifo.txt");
  bad = {inputs[0], dir.path()};
  EXPECT_MT_ERROR(mt::data::tokenize_files(*tok, bad, dir.file("train.bin"), "", {}), dir.path());
  std::filesystem::remove(fifo);
  EXPECT_EQ(dir.entries(), before);
}

TEST_F(Tokenize, RefusedOptionsAndTokenizers) {
  const std::string out = dir.file("train.bin");
  EXPECT_MT_ERROR(mt::data::tokenize_files(*tok, inputs, out, "", {.val_fraction = 0.1}), "no validation file");
  EXPECT_MT_ERROR(mt::data::tokenize_files(*tok, inputs, out, out, {.val_fraction = 0.1}), "the same");
  EXPECT_MT_ERROR(mt::data::tokenize_files(*tok, inputs, out, "", {.block_bytes = 0}), "block_bytes");
  EXPECT_MT_ERROR(mt::data::tokenize_files(*tok, std::vector<std::string>{}, out, "", {}), "no input files");
  // A vocabulary past uint16.
  mt::testing::write_bytes(dir.file("wide.tiktoken"), fx.tiktoken() + mt::testing::BpeFixture::base64("zzz") + " 70000\n");
  const Tokenizer wide = Tokenizer::load(dir.file("wide.tiktoken"));
  EXPECT_MT_ERROR(mt::data::tokenize_files(wide, inputs, out, "", {}), "70002 tokens", "uint16");
  // No <|endoftext|> to separate documents with (vocab.json without it, no config): fine without separators.
  std::filesystem::create_directories(dir.file("noeot"));
  mt::testing::write_bytes(dir.file("noeot/vocab.json"), fx.vocab_json(false).dump());
  mt::testing::write_bytes(dir.file("noeot/merges.txt"), fx.merges_txt());
  const Tokenizer noeot = Tokenizer::load(dir.file("noeot"));
  EXPECT_FALSE(noeot.end_of_text().has_value());
  EXPECT_MT_ERROR(mt::data::tokenize_files(noeot, inputs, out, "", {}), "no <|endoftext|>");
  const auto r = mt::data::tokenize_files(noeot, inputs, out, "", {.document_separator = false});
  std::vector<uint16_t> want;
  for (const std::string& t : texts)
    for (TokenId id : noeot.encode(t)) want.push_back(static_cast<uint16_t>(id));
  EXPECT_EQ(read_tokens(out), want);
  EXPECT_EQ(r.train_tokens, static_cast<int64_t>(want.size()));
}
