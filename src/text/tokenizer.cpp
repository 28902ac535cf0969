// Tokenizer: loading by path, special tokens, encode and decode (tokenizer.h).
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>

#include "mixtrain/error.h"
#include "text/tokenizer_impl.h"

namespace mixtrain::text {

std::string file_prefix(const std::string& file) { return "tokenizer: " + detail::quote_untrusted(file, 256) + ": "; }

void Tokenizer::Impl::add_special(const std::string& file, const std::string& text, TokenId id) {
  MT_CHECK(!text.empty() && text.size() <= kMaxTokenBytes, file_prefix(file), "special token ",
           detail::quote_untrusted(text), " must have 1 to ", kMaxTokenBytes, " bytes");
  MT_CHECK(id < kMaxTokens, file_prefix(file), "special token ", detail::quote_untrusted(text), " has id ", id,
           ", above the limit of ", kMaxTokens - 1);
  for (const auto& [t, i] : specials) {
    if (t == text && i == id) return;  // named twice (eos and bos both "<|endoftext|>")
    MT_CHECK(t != text, file_prefix(file), "special token ", detail::quote_untrusted(text), " has two ids, ", i,
             " and ", id);
    MT_CHECK(i != id, file_prefix(file), "special tokens ", detail::quote_untrusted(t), " and ",
             detail::quote_untrusted(text), " have the same id ", id);
  }
  // A special may also be a vocabulary entry (GPT-2's vocab.json lists "<|endoftext|>"), with its own
  // text.
  MT_CHECK(!bpe.has(id) || bpe.bytes(id) == text, file_prefix(file), "special token ", detail::quote_untrusted(text),
           " has id ", id, ", which is the vocabulary's token ", detail::quote_untrusted(bpe.bytes(id)));
  specials.emplace_back(text, id);
}

void Tokenizer::Impl::finish(const std::string& file, Bpe::WholePieces whole) {
  int missing = -1;
  if (!bpe.finish(whole, &missing)) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", missing);
    MT_FAIL(file_prefix(file), "the byte ", hex, " has no token (a byte-level BPE vocabulary holds all 256 bytes)");
  }
  std::stable_sort(specials.begin(), specials.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  id_limit = bpe.id_limit();
  for (const auto& s : specials) id_limit = std::max<size_t>(id_limit, s.second + size_t{1});
  special_of_id.assign(id_limit, -1);
  for (size_t i = 0; i < specials.size(); ++i) special_of_id[specials[i].second] = static_cast<int32_t>(i);
}

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool exists(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& path) {
  struct stat st{};
  MT_CHECK(::stat(path.c_str(), &st) == 0, file_prefix(path), "no such file or directory");
  ImplPtr impl;
  if (S_ISDIR(st.st_mode)) {
    const std::string json = path + "/tokenizer.json";
    if (exists(json)) {
      impl = load_tokenizer_json(json);
    } else {
      MT_CHECK(exists(path + "/vocab.json") && exists(path + "/merges.txt"), file_prefix(path),
               "the directory holds neither tokenizer.json nor vocab.json and merges.txt");
      impl = load_vocab_merges(path);
    }
  } else if (ends_with(path, ".tiktoken")) {
    impl = load_tiktoken(path);
  } else if (ends_with(path, ".json")) {
    impl = load_tokenizer_json(path);
  } else {
    MT_FAIL(file_prefix(path), "not a tokenizer: expected a directory (Hugging Face's files), a tokenizer.json or a "
                               "*.tiktoken file");
  }
  impl->path = path;
  return Tokenizer(std::move(impl));
}

void Tokenizer::encode_append(std::string_view text, std::vector<TokenId>& out, Specials specials) const {
  const Impl& m = *impl_;
  auto ordinary = [&](std::string_view part) {
    m.pre.split(part, [&](std::string_view piece) { m.bpe.encode_piece(piece, out); });
  };
  if (specials == Specials::kAsText || m.specials.empty()) {
    ordinary(text);
    return;
  }
  // The earliest special token's text (the longest where two start together), then the text before it.
  std::vector<size_t> next(m.specials.size(), 0);  // next occurrence of each at or after `pos`
  for (size_t k = 0; k < m.specials.size(); ++k) next[k] = text.find(m.specials[k].first);
  size_t pos = 0;
  while (true) {
    size_t best = std::string_view::npos, which = 0;
    for (size_t k = 0; k < m.specials.size(); ++k) {
      if (next[k] != std::string_view::npos && next[k] < pos) next[k] = text.find(m.specials[k].first, pos);
      if (next[k] < best) {  // strict: specials are longest first
        best = next[k];
        which = k;
      }
    }
    if (best == std::string_view::npos) break;
    ordinary(text.substr(pos, best - pos));
    out.push_back(m.specials[which].second);
    pos = best + m.specials[which].first.size();
  }
  ordinary(text.substr(pos));
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, Specials specials) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  encode_append(text, out, specials);
  return out;
}

std::string Tokenizer::token_bytes(TokenId id) const {
  const Impl& m = *impl_;
  MT_CHECK(id < m.id_limit, "tokenizer: token id ", id, " is outside the vocabulary [0, ", m.id_limit, ")");
  if (m.bpe.has(id)) return m.bpe.bytes(id);
  const int32_t s = m.special_of_id[id];
  MT_CHECK(s >= 0, "tokenizer: no token has the id ", id, " (a gap in the vocabulary)");
  return m.specials[s].first;
}

std::string Tokenizer::decode(std::span<const TokenId> ids) const {
  const Impl& m = *impl_;
  std::string out;
  out.reserve(ids.size() * 4);
  for (const TokenId id : ids) {
    if (m.bpe.has(id)) [[likely]] {
      out += m.bpe.bytes(id);
    } else {
      out += token_bytes(id);
    }
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int64_t> ids) const {
  std::vector<TokenId> narrow(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    MT_CHECK(ids[i] >= 0 && ids[i] < static_cast<int64_t>(impl_->id_limit), "tokenizer: token id ", ids[i],
             " (position ", i, ") is outside the vocabulary [0, ", impl_->id_limit, ")");
    narrow[i] = static_cast<TokenId>(ids[i]);
  }
  return decode(std::span<const TokenId>(narrow));
}

std::optional<TokenId> Tokenizer::special_token(std::string_view text) const {
  for (const auto& [t, id] : impl_->specials)
    if (t == text) return id;
  return std::nullopt;
}

std::optional<TokenId> Tokenizer::end_of_text() const { return special_token("<|endoftext|>"); }

int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(impl_->id_limit); }

std::string Tokenizer::describe() const {
  return detail::concat("byte-level BPE, ", impl_->id_limit, " tokens (", impl_->source, ")");
}

}  // namespace mixtrain::text
