// tiktoken's rank files (*.tiktoken): one "base64(bytes) rank" line per token.
#include <array>
#include <charconv>

#include "mixtrain/error.h"
#include "mixtrain/io/file.h"
#include "text/tokenizer_impl.h"

namespace mixtrain::text {

namespace {

// Standard base64 with padding; nullopt for anything else (a wrong character, length or padding).
std::optional<std::string> base64_decode(std::string_view s) {
  static const std::array<int8_t, 256> value = [] {
    std::array<int8_t, 256> v{};
    v.fill(-1);
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) v[static_cast<unsigned char>(a[i])] = static_cast<int8_t>(i);
    return v;
  }();
  if (s.empty() || s.size() % 4 != 0) return std::nullopt;
  size_t pad = 0;
  if (s.back() == '=') pad = s[s.size() - 2] == '=' ? 2 : 1;
  std::string out;
  out.reserve(s.size() / 4 * 3);
  for (size_t i = 0; i < s.size(); i += 4) {
    uint32_t w = 0;
    const bool last = i + 4 == s.size();
    for (size_t j = 0; j < 4; ++j) {
      const char c = s[i + j];
      int v;
      if (c == '=' && last && j >= 4 - pad) {
        v = 0;
      } else {
        v = value[static_cast<unsigned char>(c)];
        if (v < 0) return std::nullopt;
      }
      w = (w << 6) | static_cast<uint32_t>(v);
    }
    const size_t bytes = last ? 3 - pad : 3;
    // Bits beyond the last byte must be zero (the canonical spelling).
    if (last && pad > 0 && (w & ((1u << (8 * pad)) - 1)) != 0) return std::nullopt;
    for (size_t j = 0; j < bytes; ++j) out.push_back(static_cast<char>((w >> (16 - 8 * j)) & 0xFF));
  }
  return out;
}

}  // namespace

ImplPtr load_tiktoken(const std::string& path) {
  const std::string text = io::read_file(path, kMaxFileBytes, "tokenizer");
  auto impl = std::make_shared<Tokenizer::Impl>();
  impl->source = "tiktoken";
  Bpe& bpe = impl->bpe;
  uint32_t max_rank = 0;
  size_t tokens = 0;
  // base64 of 256 bytes is 344 characters; a rank has at most 7 digits.
  constexpr size_t kMaxLine = 344 + 1 + 16;
  for_each_line(text, [&](std::string_view line, size_t line_no) {
    MT_CHECK(line.size() <= kMaxLine, file_prefix(path), "line ", line_no, " is longer than ", kMaxLine,
             " bytes (a token has at most ", kMaxTokenBytes, " bytes)");
    const size_t space = line.find(' ');
    MT_CHECK(space != std::string_view::npos && line.find(' ', space + 1) == std::string_view::npos,
             file_prefix(path), "line ", line_no, " is not \"<base64 bytes> <rank>\": ", detail::quote_untrusted(line));
    const std::optional<std::string> bytes = base64_decode(line.substr(0, space));
    MT_CHECK(bytes.has_value(), file_prefix(path), "line ", line_no, ": invalid base64 ",
             detail::quote_untrusted(line.substr(0, space)));
    MT_CHECK(!bytes->empty() && bytes->size() <= kMaxTokenBytes, file_prefix(path), "line ", line_no, ": a token of ",
             bytes->size(), " bytes (1 to ", kMaxTokenBytes, " allowed)");
    const std::string_view digits = line.substr(space + 1);
    uint32_t rank = 0;
    const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
    MT_CHECK(ec != std::errc::result_out_of_range || p != digits.data() + digits.size(), file_prefix(path), "line ",
             line_no, ": rank ", detail::quote_untrusted(digits), " is above the limit of ", kMaxTokens - 1);
    MT_CHECK(!digits.empty() && ec == std::errc() && p == digits.data() + digits.size(), file_prefix(path), "line ",
             line_no, ": the rank ", detail::quote_untrusted(digits), " is not a decimal number");
    MT_CHECK(rank < kMaxTokens, file_prefix(path), "line ", line_no, ": rank ", rank, " is above the limit of ",
             kMaxTokens - 1);
    MT_CHECK(++tokens <= kMaxTokens, file_prefix(path), "more than ", kMaxTokens, " tokens");
    if (!bpe.add_token(rank, *bytes)) {
      const TokenId other = bpe.find(*bytes);
      if (other != kNoToken) MT_FAIL(file_prefix(path), "line ", line_no, ": the token ", detail::quote_untrusted(*bytes),
                                     " is listed twice (ranks ", other, " and ", rank, ")");
      MT_FAIL(file_prefix(path), "line ", line_no, ": the rank ", rank, " is given twice");
    }
    max_rank = std::max(max_rank, rank);
    return true;
  });
  MT_CHECK(tokens > 0, file_prefix(path), "no tokens");
  // The merge table: every split of a token into two tokens merges to it at the token's rank. tiktoken
  // merges the adjacent pair whose concatenation has the lowest rank; its parts are always tokens, so
  // this table gives the same merges.
  for (TokenId id = 0; id < bpe.id_limit(); ++id) {
    if (!bpe.has(id)) continue;
    const std::string& t = bpe.bytes(id);
    for (size_t k = 1; k < t.size(); ++k) {
      const TokenId a = bpe.find(std::string_view(t).substr(0, k));
      if (a == kNoToken) continue;
      const TokenId b = bpe.find(std::string_view(t).substr(k));
      if (b == kNoToken) continue;
      bpe.add_merge(a, b, id, id);  // a pair's concatenation is one token: never listed twice
    }
  }
  // GPT-2's convention: <|endoftext|> after the last rank.
  impl->add_special(path, "<|endoftext|>", max_rank + 1);
  impl->finish(path, Bpe::WholePieces::kWholeToken);
  return impl;
}

}  // namespace mixtrain::text
