// GPT-2's pre-tokenizer with PCRE2 (pretokenizer.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/pretokenizer.h"

#include <pcre2.h>

#include "mixtrain/error.h"

namespace mixtrain::text {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

pcre2_code* code_of(void* p) { return static_cast<pcre2_code*>(p); }

}  // namespace

PreTokenizer::PreTokenizer() {
  int err = 0;
  PCRE2_SIZE offset = 0;
  // UCP: \s, \p{L}, \p{N} by Unicode properties. MATCH_INVALID_UTF: any bytes may be matched (the
  // expression then matches within the valid UTF-8 stretches only).
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern.data()), kGpt2Pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &offset, nullptr);
  MT_INTERNAL_ASSERT(code != nullptr, "PCRE2 refused GPT-2's expression at ", offset, ": ", pcre2_message(err));
  code_ = code;
  // Without a JIT (a platform PCRE2 has none for, or one built without it) the interpreter runs it.
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

PreTokenizer::~PreTokenizer() { pcre2_code_free(code_of(code_)); }

PreTokenizer::Cursor::Cursor(const PreTokenizer& pre, std::string_view text) : pre_(pre), text_(text) {
  data_ = pcre2_match_data_create_from_pattern(code_of(pre.code_), nullptr);
  MT_CHECK(data_ != nullptr, "tokenizer: out of memory for PCRE2 match data");
}

PreTokenizer::Cursor::~Cursor() { pcre2_match_data_free(static_cast<pcre2_match_data*>(data_)); }

bool PreTokenizer::Cursor::next(std::string_view& piece) {
  if (pos_ >= text_.size()) return false;
  if (!pending_ && !done_) {
    auto* md = static_cast<pcre2_match_data*>(data_);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text_.data());
    // The JIT's own entry (no option checks) where there is one; its default 32 KiB stack is
    // enough: no part of the expression recurses or backtracks into nested groups.
    const int rc = pre_.jit_ ? pcre2_jit_match(code_of(pre_.code_), subject, text_.size(), pos_, 0, md, nullptr)
                             : pcre2_match(code_of(pre_.code_), subject, text_.size(), pos_, 0, md, nullptr);
    if (rc >= 0) {
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      match_start_ = ov[0];
      match_end_ = ov[1];
      // Every alternative matches at least one character; an empty match would loop.
      MT_INTERNAL_ASSERT(match_end_ > match_start_ && match_start_ >= pos_, "empty pre-tokenizer match");
      pending_ = true;
    } else if (rc == PCRE2_ERROR_NOMATCH) {
      done_ = true;
    } else {
      MT_FAIL("tokenizer: the pre-tokenizer's expression failed on the text: ", pcre2_message(rc));
    }
  }
  if (pending_ && match_start_ == pos_) {
    piece = text_.substr(pos_, match_end_ - pos_);
    pos_ = match_end_;
    pending_ = false;
    return true;
  }
  // Bytes before the next match (or to the end): the invalid UTF-8 run no match covers.
  const size_t end = pending_ ? match_start_ : text_.size();
  piece = text_.substr(pos_, end - pos_);
  pos_ = end;
  return true;
}

}  // namespace mixtrain::text
