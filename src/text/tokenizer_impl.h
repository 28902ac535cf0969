// What a Tokenizer holds (tokenizer.h), and what the loaders fill in. Internal to the text layer.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mixtrain/text/tokenizer.h"
#include "text/bpe.h"
#include "text/pretokenizer.h"

namespace mixtrain::text {

struct Tokenizer::Impl {
  Bpe bpe;
  PreTokenizer pre;
  std::vector<std::pair<std::string, TokenId>> specials;  // text, id; longest text first
  std::vector<int32_t> special_of_id;                     // id -> index in specials, -1 for none
  std::string path;    // the file or directory it was read from (messages)
  std::string source;  // "tokenizer.json", "vocab.json + merges.txt", "tiktoken"
  size_t id_limit = 0;

  // Adds a special token; mt::Error (naming `file`) when its id or text clashes with another token.
  void add_special(const std::string& file, const std::string& text, TokenId id);
  // After the loader: the byte tokens (mt::Error naming `file` and the first missing byte), the
  // whole-piece flags, the id index of the specials.
  void finish(const std::string& file, Bpe::WholePieces whole);
};

using ImplPtr = std::shared_ptr<Tokenizer::Impl>;

// The loaders (load_*.cpp); each an mt::Error naming the file for anything wrong.
ImplPtr load_tiktoken(const std::string& path);
ImplPtr load_tokenizer_json(const std::string& path);
ImplPtr load_vocab_merges(const std::string& dir);

// "tokenizer: 'FILE': " for messages.
std::string file_prefix(const std::string& file);

// Calls fn(line, line_no) for each line of `text` (1-based numbers, without the '\n') until fn
// returns false; a blank last line (the text ends in "\n\n", or is "\n") is no line.
template <typename F>
void for_each_line(std::string_view text, F&& fn) {
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.empty() && pos >= text.size()) return;
    if (!fn(line, line_no)) return;
  }
}

}  // namespace mixtrain::text
