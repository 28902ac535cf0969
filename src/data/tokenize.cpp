// Text files to token files, streaming and in parallel (data/tokenize.h).
#include "mixtrain/data/tokenize.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>
#include <thread>
#include <vector>

#include "mixtrain/data/token_file.h"
#include "mixtrain/error.h"
#include "mixtrain/io/file.h"

namespace mixtrain::data {

namespace {

constexpr uint64_t kMaxBlock = uint64_t{64} << 20;
constexpr const char* kWho = "tokenize_files";

// A stretch of one file, encoded by one thread.
struct Block {
  std::string bytes;
  bool to_val = false;
  bool separator_first = false;  // <|endoftext|> before it (the first block of a document)
};

// The largest safe cut at or before `t` in a file of `size` bytes (0 when there is none): the rule
// of text::safe_cut depends only on the bytes around the cut, so it is found by reading backwards in
// windows that overlap by two bytes.
uint64_t safe_cut_before(const io::ReadFile& f, uint64_t t) {
  constexpr uint64_t kWindow = uint64_t{1} << 20;
  std::string w;
  uint64_t end = std::min(f.size(), t + 2);  // a cut at t needs the byte after it
  while (end >= 3) {
    const uint64_t begin = end > kWindow ? end - kWindow : 0;
    w.resize(end - begin);
    f.read_at(w.data(), w.size(), begin);
    const size_t p = text::safe_cut(w);
    if (p > 0) return begin + p;
    if (begin == 0) break;
    end = begin + 2;
  }
  return 0;
}

// Reads one file as blocks, each ending at a safe cut, at the end of the file, or at `split_at` (the
// end of the validation part, when it falls in this file).
class BlockReader {
 public:
  BlockReader(const std::string& path, uint64_t split_at, uint64_t block_bytes)
      : file_(path, kWho), split_at_(split_at), block_bytes_(block_bytes) {}

  uint64_t size() const { return file_.size(); }
  uint64_t position() const { return done_; }

  // The next block's bytes into `out` (false at the end of the file); `to_val`: whether it lies before
  // the split.
  bool next(std::string& out, bool& to_val) {
    if (done_ >= file_.size()) return false;
    const uint64_t limit = done_ < split_at_ ? std::min(split_at_, file_.size()) : file_.size();
    to_val = done_ < split_at_;
    uint64_t want = block_bytes_;
    while (true) {
      // Fill `pending_` (file bytes [done_, read_)) up to `want`, never past `limit`.
      while (pending_.size() < want && read_ < limit) {
        const uint64_t n = std::min<uint64_t>(want - pending_.size(), limit - read_);
        const size_t old = pending_.size();
        pending_.resize(old + n);
        file_.read_at(pending_.data() + old, n, read_);
        read_ += n;
      }
      size_t cut;
      if (read_ == limit) {
        cut = pending_.size();  // the end of the file or of the validation part: a cut by definition
      } else {
        cut = text::safe_cut(pending_);
        if (cut == 0) {
          if (want < kMaxBlock) {
            want = std::min(kMaxBlock, want * 2);
            continue;
          }
          cut = pending_.size();  // 64 MiB without a safe cut: encoded as it is (tokenize.h)
        }
      }
      out.assign(pending_, 0, cut);
      pending_.erase(0, cut);
      done_ += cut;
      return true;
    }
  }

 private:
  io::ReadFile file_;
  uint64_t split_at_, block_bytes_;
  uint64_t done_ = 0, read_ = 0;
  std::string pending_;
};

}  // namespace

TokenizeResult tokenize_files(const text::Tokenizer& tok, std::span<const std::string> inputs,
                              const std::string& train_out, const std::string& val_out,
                              const TokenizeOptions& options) {
  MT_CHECK(!inputs.empty(), kWho, ": no input files");
  MT_CHECK(options.val_fraction >= 0 && options.val_fraction < 1, kWho, ": val_fraction must be in [0, 1), got ",
           options.val_fraction);
  MT_CHECK(!val_out.empty() || options.val_fraction == 0, kWho, ": val_fraction is ", options.val_fraction,
           " but no validation file is given");
  MT_CHECK(val_out != train_out, kWho, ": the training and validation files are the same, '", train_out, "'");
  MT_CHECK(options.block_bytes >= 1 && options.block_bytes <= kMaxBlock, kWho, ": block_bytes must be in [1, ",
           kMaxBlock, "], got ", options.block_bytes);
  MT_CHECK(options.threads >= 0 && options.threads <= 1024, kWho, ": threads must be in [0, 1024], got ", options.threads);
  MT_CHECK(tok.vocab_size() <= 65536, kWho, ": the tokenizer has ", tok.vocab_size(),
           " tokens; token files (llm.c's version 1) hold uint16 ids, at most 65536 tokens");
  std::optional<text::TokenId> eot;
  if (options.document_separator) {
    eot = tok.end_of_text();
    MT_CHECK(eot.has_value(), kWho, ": the tokenizer has no <|endoftext|> to separate documents with (",
             tok.describe(), ")");
  }
  const int threads = options.threads > 0 ? options.threads
                                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  // Sizes first: every input must be a readable regular file before anything is written.
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (const std::string& path : inputs) {
    io::ReadFile f(path, kWho);
    sizes.push_back(f.size());
    total += f.size();
  }
  // The end of the validation part: a safe cut at or before the target byte, in the file holding it.
  uint64_t val_end = 0;
  if (options.val_fraction > 0) {
    const auto target = static_cast<uint64_t>(std::floor(static_cast<double>(total) * options.val_fraction));
    uint64_t start = 0;
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (target < start + sizes[k]) {
        val_end = start + (target > start ? safe_cut_before(io::ReadFile(inputs[k], kWho), target - start) : 0);
        break;
      }
      start += sizes[k];
    }
  }

  std::optional<TokenFileWriter> train, val;
  train.emplace(train_out);
  if (!val_out.empty()) val.emplace(val_out);
  TokenizeResult result;
  result.documents = static_cast<int64_t>(inputs.size());

  std::vector<Block> batch;
  std::vector<std::vector<text::TokenId>> encoded(static_cast<size_t>(threads));
  uint64_t bytes_done = 0;
  auto run_batch = [&] {
    std::vector<std::exception_ptr> errors(batch.size());
    auto work = [&](size_t i) {
      try {
        encoded[i].clear();
        if (batch[i].separator_first) encoded[i].push_back(*eot);
        tok.encode_append(batch[i].bytes, encoded[i], options.specials);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    };
    std::vector<std::thread> pool;
    for (size_t i = 1; i < batch.size(); ++i) pool.emplace_back(work, i);
    if (!batch.empty()) work(0);
    for (std::thread& t : pool) t.join();
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].to_val) {
        val->append(encoded[i]);
        result.val_tokens += static_cast<int64_t>(encoded[i].size());
      } else {
        train->append(encoded[i]);
        result.train_tokens += static_cast<int64_t>(encoded[i].size());
      }
      bytes_done += batch[i].bytes.size();
    }
    batch.clear();
    if (options.progress) options.progress(bytes_done, total);
  };

  uint64_t start = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const uint64_t split_at = val_end > start ? val_end - start : 0;
    BlockReader reader(inputs[k], split_at, options.block_bytes);
    MT_CHECK(reader.size() == sizes[k], kWho, ": '", inputs[k], "' changed size while being read (", sizes[k], " then ",
             reader.size(), " bytes)");
    bool first = true;
    while (true) {
      Block b;
      const bool more = reader.next(b.bytes, b.to_val);
      if (!more && !first) break;
      if (!more) b.to_val = start < val_end;  // an empty document: its separator alone
      b.separator_first = first && eot.has_value();
      first = false;
      if (more || b.separator_first) batch.push_back(std::move(b));
      if (batch.size() == static_cast<size_t>(threads)) run_batch();
      if (!more) break;
    }
    start += sizes[k];
  }
  run_batch();
  result.bytes = total;
  if (val) val->finish();
  train->finish();
  return result;
}

}  // namespace mixtrain::data
