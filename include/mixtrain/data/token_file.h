// mixtrain/data/token_file.h: pre-tokenised text in llm.c's file format, for language models with a
// vocabulary of their own (GPT-2's 50257 BPE tokens).
//
// Format (little-endian): a header of 256 int32 -- [0] magic 20240520, [1] version 1, [2] the
// token count N, the rest 0 -- then N uint16 tokens. The file is read as hostile: regular files only
// (a FIFO is refused, never waited on), its size must be exactly 1024 + 2 N bytes (a count that
// lies, in either direction, is refused), N at most TokenFileOptions::max_tokens, and every token
// below the model's vocabulary (the first one that is not is named with its position). Every error
// is an mt::Error naming the file.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mixtrain/data/dataset.h"

namespace mixtrain::io {
class AtomicFile;
}

namespace mixtrain::data {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr int64_t kTokenFileHeaderBytes = 256 * 4;

struct TokenFileOptions {
  // Distance in tokens between the starts of consecutive examples; 0: the context (windows that do
  // not overlap, as llm.c reads its data).
  int64_t stride = 0;
  int64_t max_tokens = int64_t{1} << 32;
};

// Example i is x = tokens[s .. s+T), y = tokens[s+1 .. s+T+1) with s = i * stride and T = context
// (a window of context + 1 tokens), both int64 [T]; batches are int64 [B, T]. The file must hold at
// least context + 1 tokens. The order examples are drawn in is the DataLoader's (seeded).
class TokenFileDataset : public Dataset {
 public:
  TokenFileDataset(const std::string& path, int64_t context, int64_t vocab_size, TokenFileOptions options = {});
  // The same over tokens in memory (`name` is used in messages).
  static TokenFileDataset from_tokens(std::vector<uint16_t> tokens, int64_t context, int64_t vocab_size,
                                      TokenFileOptions options = {}, const std::string& name = "<tokens>");

  int64_t size() const override;
  Batch get_batch(std::span<const int64_t> indices) const override;
  uint64_t fingerprint() const override;

  int64_t context() const { return context_; }
  int64_t vocab_size() const { return vocab_size_; }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }

  // Writes `tokens` in the format above, atomically (for tools and tests).
  static void write(const std::string& path, std::span<const uint16_t> tokens);

  const std::vector<uint16_t>& tokens() const { return tokens_; }

 private:
  TokenFileDataset(std::vector<uint16_t> tokens, const std::string& name, int64_t context, int64_t vocab_size,
                   TokenFileOptions options);
  std::vector<uint16_t> tokens_;
  int64_t context_, vocab_size_, stride_;
};

// Writes a token file in the format above as the tokens come (a tokenizer's output, of any length):
// into a temporary file in the target's directory (io::AtomicFile), with the count patched into the
// header by finish(), then fsync and rename. Destroyed unfinished (an error on the way), it removes
// the temporary and leaves the target as it was. Tokens must be below 65536 (the format's uint16),
// at most 2^31 - 1 of them (the header's int32 count); mt::Error naming the file otherwise.
class TokenFileWriter {
 public:
  explicit TokenFileWriter(const std::string& path);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  void append(std::span<const uint32_t> tokens);
  void append(std::span<const uint16_t> tokens);
  int64_t count() const { return count_; }
  // Writes the count into the header and commits the file. At most once.
  void finish();

 private:
  void flush();
  std::string path_;
  std::unique_ptr<io::AtomicFile> file_;
  std::vector<uint16_t> buffer_;
  int64_t count_ = 0;
};

}  // namespace mixtrain::data
