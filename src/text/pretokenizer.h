// GPT-2's pre-tokenizer: the text cut into the pieces that BPE merges within (tokenizer.h), by PCRE2
// with its JIT compiler (the interpreter where the JIT is unavailable).
#pragma once

#include <memory>
#include <string_view>

namespace mixtrain::text {

// GPT-2's expression as Hugging Face and transformers spell it, and tiktoken's spelling of the same.
inline constexpr std::string_view kGpt2Pattern =
    R"('(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kGpt2PatternTiktoken =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class PreTokenizer {
 public:
  PreTokenizer();  // GPT-2's expression
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Calls piece(std::string_view) for each piece of `text` in order; the pieces cover the text
  // exactly. A run of bytes no match covers (invalid UTF-8) is one piece.
  template <typename F>
  void split(std::string_view text, F&& piece) const {
    Cursor c(*this, text);
    std::string_view p;
    while (c.next(p)) piece(p);
  }

  bool jit() const { return jit_; }

 private:
  class Cursor {
   public:
    Cursor(const PreTokenizer& pre, std::string_view text);
    ~Cursor();
    bool next(std::string_view& piece);

   private:
    const PreTokenizer& pre_;
    std::string_view text_;
    size_t pos_ = 0;
    size_t match_start_ = 0, match_end_ = 0;  // a found match not yet returned, when pending_
    bool pending_ = false, done_ = false;
    void* data_ = nullptr;  // pcre2_match_data*
  };
  void* code_ = nullptr;  // pcre2_code*
  bool jit_ = false;
};

}  // namespace mixtrain::text
