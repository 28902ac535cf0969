// llm.c token files (data/token_file.h).
#include "mixtrain/data/token_file.h"

#include <array>
#include <bit>
#include <cstring>

#include "data/fingerprint.h"
#include "data/windows.h"
#include "mixtrain/error.h"
#include "mixtrain/io/file.h"

namespace mixtrain::data {

static_assert(std::endian::native == std::endian::little, "token files are little-endian, as is every target");

namespace {

void check_sizes(int64_t context, int64_t vocab_size, const TokenFileOptions& options) {
  MT_CHECK(context >= 1, "TokenFileDataset: context must be at least 1, got ", context);
  MT_CHECK(vocab_size >= 1 && vocab_size <= 65536, "TokenFileDataset: vocab_size must be in [1, 65536] ",
           "(tokens are uint16), got ", vocab_size);
  MT_CHECK(options.stride >= 0, "TokenFileDataset: stride must be non-negative, got ", options.stride);
}

std::vector<uint16_t> read_token_file(const std::string& path, const TokenFileOptions& options) {
  io::ReadFile f(path, "TokenFileDataset");  // regular files only: a FIFO is refused, never waited on
  const uint64_t bytes = f.size();
  MT_CHECK(bytes >= static_cast<uint64_t>(kTokenFileHeaderBytes), "TokenFileDataset: '", path, "' has ", bytes,
           " bytes, less than the ", kTokenFileHeaderBytes, "-byte header of a token file (llm.c's format)");
  std::array<int32_t, 256> header{};
  f.read_at(header.data(), kTokenFileHeaderBytes, 0);
  MT_CHECK(header[0] == kTokenFileMagic, "TokenFileDataset: '", path, "' starts with ", header[0], ", not the magic ",
           kTokenFileMagic, " of a token file (llm.c's format: 256 int32 of header, then uint16 tokens)");
  MT_CHECK(header[1] == kTokenFileVersion, "TokenFileDataset: '", path, "' is version ", header[1], "; only version ",
           kTokenFileVersion, " (uint16 tokens) is read", header[1] == 2 ? " (version 2 holds uint32 tokens)" : "");
  const int64_t n = header[2];
  MT_CHECK(n >= 0 && n <= options.max_tokens, "TokenFileDataset: '", path, "' declares ", n, " tokens, outside [0, ",
           options.max_tokens, "]");
  const uint64_t want = static_cast<uint64_t>(kTokenFileHeaderBytes) + 2 * static_cast<uint64_t>(n);
  MT_CHECK(bytes == want, "TokenFileDataset: '", path, "' declares ", n, " tokens (", want, " bytes) but has ", bytes,
           " bytes", bytes < want ? " (truncated)" : " (trailing bytes)");
  std::vector<uint16_t> tokens(static_cast<size_t>(n));
  if (n > 0) f.read_at(tokens.data(), 2 * static_cast<uint64_t>(n), kTokenFileHeaderBytes);
  return tokens;
}

}  // namespace

TokenFileDataset::TokenFileDataset(const std::string& path, int64_t context, int64_t vocab_size,
                                   TokenFileOptions options)
    : TokenFileDataset((check_sizes(context, vocab_size, options), read_token_file(path, options)),
                       "'" + path + "'", context, vocab_size, options) {}

TokenFileDataset TokenFileDataset::from_tokens(std::vector<uint16_t> tokens, int64_t context, int64_t vocab_size,
                                               TokenFileOptions options, const std::string& name) {
  check_sizes(context, vocab_size, options);
  MT_CHECK(static_cast<int64_t>(tokens.size()) <= options.max_tokens, "TokenFileDataset: ", name, " holds ",
           tokens.size(), " tokens, above the limit of ", options.max_tokens);
  return TokenFileDataset(std::move(tokens), name, context, vocab_size, options);
}

TokenFileDataset::TokenFileDataset(std::vector<uint16_t> tokens, const std::string& name, int64_t context,
                                   int64_t vocab_size, TokenFileOptions options)
    : tokens_(std::move(tokens)),
      context_(context),
      vocab_size_(vocab_size),
      stride_(options.stride == 0 ? context : options.stride) {
  const int64_t n = num_tokens();
  MT_CHECK(n >= context + 1, "TokenFileDataset: ", name, " holds ", n, " tokens; a context of ", context,
           " needs at least ", context + 1, " (a window plus the next token as its target)");
  for (size_t i = 0; i < tokens_.size(); ++i)
    MT_CHECK(tokens_[i] < vocab_size, "TokenFileDataset: ", name, ": token ", tokens_[i], " at position ", i,
             " is outside the model's vocabulary [0, ", vocab_size, ")");
}

int64_t TokenFileDataset::size() const { return (num_tokens() - context_ - 1) / stride_ + 1; }

Batch TokenFileDataset::get_batch(std::span<const int64_t> indices) const {
  check_indices(indices, "TokenFileDataset::get_batch");
  return windows::batch(tokens_.data(), indices, stride_, context_);
}

uint64_t TokenFileDataset::fingerprint() const {
  const int64_t layout[] = {context_, stride_, vocab_size_};
  uint64_t h = hashing::hash_bytes("tokens", 6, hashing::kFingerprintSeed);
  h = hashing::hash_bytes(layout, sizeof(layout), h);
  return hashing::hash_bytes(tokens_.data(), 2 * tokens_.size(), h);
}

void TokenFileDataset::write(const std::string& path, std::span<const uint16_t> tokens) {
  MT_CHECK(tokens.size() <= static_cast<size_t>(INT32_MAX), "TokenFileDataset::write: ", tokens.size(),
           " tokens do not fit the header's int32 count");
  std::array<int32_t, 256> header{};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  std::string bytes(static_cast<size_t>(kTokenFileHeaderBytes) + 2 * tokens.size(), '\0');
  std::memcpy(bytes.data(), header.data(), kTokenFileHeaderBytes);
  if (!tokens.empty()) std::memcpy(bytes.data() + kTokenFileHeaderBytes, tokens.data(), 2 * tokens.size());
  io::write_file_atomic(path, bytes, "TokenFileDataset::write");
}

// ---- TokenFileWriter ------------------------------------------------------------------------------

namespace {
constexpr size_t kWriterBuffer = size_t{1} << 18;  // tokens
constexpr int64_t kMaxCount = INT32_MAX;            // the header's count is an int32
}  // namespace

TokenFileWriter::TokenFileWriter(const std::string& path)
    : path_(path), file_(std::make_unique<io::AtomicFile>(path, "TokenFileWriter")) {
  std::array<int32_t, 256> header{};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  file_->write(header.data(), kTokenFileHeaderBytes);
  buffer_.reserve(kWriterBuffer);
}

TokenFileWriter::~TokenFileWriter() = default;  // an uncommitted AtomicFile removes its temporary

void TokenFileWriter::append(std::span<const uint32_t> tokens) {
  MT_CHECK(file_ != nullptr, "TokenFileWriter: '", path_, "' is already finished");
  MT_CHECK(count_ + static_cast<int64_t>(tokens.size()) <= kMaxCount, "TokenFileWriter: '", path_, "': more than ",
           kMaxCount, " tokens, the most a token file's int32 count can hold");
  for (size_t i = 0; i < tokens.size(); ++i) {
    MT_CHECK(tokens[i] < 65536, "TokenFileWriter: '", path_, "': token ", tokens[i], " (position ",
             count_ + static_cast<int64_t>(i), ") does not fit the format's uint16 tokens (ids below 65536; llm.c's ",
             "version 1 files)");
    buffer_.push_back(static_cast<uint16_t>(tokens[i]));
    if (buffer_.size() == kWriterBuffer) flush();
  }
  count_ += static_cast<int64_t>(tokens.size());
}

void TokenFileWriter::append(std::span<const uint16_t> tokens) {
  MT_CHECK(file_ != nullptr, "TokenFileWriter: '", path_, "' is already finished");
  MT_CHECK(count_ + static_cast<int64_t>(tokens.size()) <= kMaxCount, "TokenFileWriter: '", path_, "': more than ",
           kMaxCount, " tokens, the most a token file's int32 count can hold");
  flush();
  file_->write(tokens.data(), tokens.size() * 2);
  count_ += static_cast<int64_t>(tokens.size());
}

void TokenFileWriter::flush() {
  if (buffer_.empty()) return;
  file_->write(buffer_.data(), buffer_.size() * 2);
  buffer_.clear();
}

void TokenFileWriter::finish() {
  MT_CHECK(file_ != nullptr, "TokenFileWriter: '", path_, "' is already finished");
  flush();
  const auto n = static_cast<int32_t>(count_);
  file_->write_at(2 * sizeof(int32_t), &n, sizeof n);
  file_->commit();
  file_.reset();
}

}  // namespace mixtrain::data
