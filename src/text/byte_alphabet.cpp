// GPT-2's byte alphabet (byte_alphabet.h).
#include "text/byte_alphabet.h"

#include <array>
#include <cstdint>

namespace mixtrain::text {

namespace {

struct Alphabet {
  std::array<uint32_t, 256> code{};   // byte -> code point
  std::array<int16_t, 512> byte{};    // code point (< 512) -> byte, -1 outside the alphabet
  Alphabet() {
    byte.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool same = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      code[b] = same ? b : next++;
      byte[code[b]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

std::string to_alphabet(std::string_view bytes) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const unsigned char b : bytes) {
    const uint32_t c = a.code[b];  // < 0x800: one or two UTF-8 bytes
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

std::optional<std::string> from_alphabet(std::string_view s) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c0 = static_cast<unsigned char>(s[i]);
    uint32_t cp;
    if (c0 < 0x80) {
      cp = c0;
      i += 1;
    } else if ((c0 & 0xE0) == 0xC0 && i + 1 < s.size() && (static_cast<unsigned char>(s[i + 1]) & 0xC0) == 0x80) {
      cp = ((c0 & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
      if (cp < 0x80) return std::nullopt;  // overlong
      i += 2;
    } else {
      return std::nullopt;  // every character of the alphabet is below U+0800
    }
    if (cp >= a.byte.size() || a.byte[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(a.byte[cp]));
  }
  return out;
}

}  // namespace mixtrain::text
