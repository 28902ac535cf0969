// What a Tokenizer holds (tokenizer.h), and what the loaders fill in. Internal to the text layer.
#pragma once

#include <memory>
#include <string>
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

}  // namespace mixtrain::text
