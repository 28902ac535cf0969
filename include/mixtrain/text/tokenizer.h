// mixtrain/text/tokenizer.h: GPT-2's byte-level BPE tokenizer, read from the files Hugging Face and
// tiktoken publish, and written back in Hugging Face's layout.
//
// Text is cut into pieces by GPT-2's pre-tokenizer regular expression (tiktoken's r50k/gpt2 and
// transformers' GPT-2, with Unicode letter and number classes and a negative lookahead):
//   '(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// and each piece's bytes are merged by byte-pair encoding: starting from one token per byte, the
// adjacent pair with the lowest merge rank is merged (the leftmost of equals) until no pair merges.
// Any bytes encode, valid UTF-8 or not, and decode() gives back exactly the bytes encoded.
//
// Invalid UTF-8. The expression is matched on the valid UTF-8 stretches of the text (PCRE2's
// PCRE2_MATCH_INVALID_UTF): an invalid byte is seen by the expression as a character that is neither
// a letter, a number, a space nor anything else (no class matches it, so no piece crosses it; to the
// lookahead `(?!\S)` it is not a non-space character). Each maximal run of bytes that no match covers
// (these are exactly the invalid bytes) is a piece of its own, merged like any other.
//
// Files (Tokenizer::load):
//  - a Hugging Face directory: tokenizer.json when there is one, else vocab.json + merges.txt with
//    the special tokens of tokenizer_config.json (added_tokens_decoder, bos/eos/unk/pad_token) and
//    special_tokens_map.json, else "<|endoftext|>" when the vocabulary holds it;
//  - a tokenizer.json file (transformers' GPT-2: a BPE model, a ByteLevel pre-tokenizer or a Split of
//    the GPT-2 expression followed by ByteLevel, merges as "a b" strings or ["a", "b"] pairs);
//  - a *.tiktoken file (one "base64(bytes) rank" line per token); "<|endoftext|>" then gets the id
//    after the largest rank (50256 for GPT-2), GPT-2's convention.
// Merge semantics follow the format: Hugging Face merges by the rank of the listed pair; tiktoken by
// the rank of the pair's concatenation (a table of every split of every token gives the same).
// Everything is read as hostile input: files of at most 64 MiB, at most 1,048,576 tokens of 1 to
// 256 bytes, ids unique and below 2^20, all 256 single bytes present as tokens, no unknown token in
// a merge (Hugging Face: the merged token must be in the vocabulary too), no duplicate token, rank or
// merge, and nothing this class does not implement (a prefix space, another expression, dropout,
// byte fallback, a normalizer, a post-processor that adds tokens, another model type...). Every
// problem is a one-line mt::Error naming the file, and the line or field where it applies.
//
// Thread safety: a Tokenizer is immutable after load; encode and decode may be called from any
// number of threads at once. Copies share the tables.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mixtrain::text {

using TokenId = uint32_t;

// What encode does with special tokens' text ("<|endoftext|>") found in its input.
enum class Specials {
  kAsText,     // ordinary text, tokenized like any other (tiktoken's encode_ordinary)
  kRecognize,  // becomes the special token's id (tiktoken's allowed_special="all"; transformers' default)
};

class Tokenizer {
 public:
  // See the file list above. mt::Error naming the file for anything missing, malformed or refused.
  static Tokenizer load(const std::string& path);

  std::vector<TokenId> encode(std::string_view text, Specials specials = Specials::kAsText) const;
  // encode, appending to `out` (no allocation once `out` has grown).
  void encode_append(std::string_view text, std::vector<TokenId>& out, Specials specials = Specials::kAsText) const;

  // The exact bytes of the tokens (special tokens as their text); mt::Error for an id outside the
  // vocabulary (negative, >= vocab_size(), or an id no token has).
  std::string decode(std::span<const TokenId> ids) const;
  std::string decode(std::span<const int64_t> ids) const;
  // One token's bytes (a special token's text); mt::Error as decode.
  std::string token_bytes(TokenId id) const;

  // The id of the special token spelled `text`, if there is one.
  std::optional<TokenId> special_token(std::string_view text) const;
  // special_token("<|endoftext|>").
  std::optional<TokenId> end_of_text() const;
  // Largest id + 1, special tokens included (50257 for GPT-2).
  int64_t vocab_size() const;
  // "byte-level BPE, 50257 tokens (tokenizer.json)".
  std::string describe() const;

  // Writes vocab.json, merges.txt, tokenizer_config.json and special_tokens_map.json into `dir`
  // (created if needed; each file atomically), so that transformers' AutoTokenizer.from_pretrained(dir)
  // and GPT2TokenizerFast load it (tokenizer_class "GPT2Tokenizer", bos/eos/unk "<|endoftext|>" when
  // the tokenizer has it, clean_up_tokenization_spaces false so that decoding stays exact) and
  // Tokenizer::load(dir) gives back the same tokenizer. A tokenizer read from a tiktoken file is
  // written with one merge per split of each token, in the order of the tokens' ranks: Hugging
  // Face's BPE on those merges gives tiktoken's result, except where two different splits of the
  // same token are both mergeable in one piece at once (tiktoken merges the leftmost, Hugging Face the
  // one listed first), which GPT-2's vocabulary never produces.
  void save_pretrained(const std::string& dir, int64_t model_max_length) const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Bytes for display: valid UTF-8 as it is, each maximal invalid subpart replaced by one U+FFFD, as
// Python's errors="replace" and ICU do (decode never
// does this).
std::string printable(std::string_view bytes);

// The largest p <= text.size() (0 if none) such that encode(text[0, p)) followed by encode(text[p, ))
// equals encode(text) however the text continues after its end: a place no piece of the
// pre-tokenizer can straddle. Used to cut a stream into blocks that are encoded independently.
// Found only where text[p - 1] and text[p + 1] are printable non-space ASCII (0x21..0x7E) and
// text[p] is ' ' or '\n' (why that is safe: src/text/safe_cut.cpp). Holds for Specials::kAsText, and
// for kRecognize when no special token's text contains ' ' or '\n'.
size_t safe_cut(std::string_view text);

}  // namespace mixtrain::text
