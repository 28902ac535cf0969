// printable(): bytes for display, invalid UTF-8 replaced by U+FFFD (tokenizer.h).
#include <cstdint>

#include "mixtrain/text/tokenizer.h"

namespace mixtrain::text {

namespace {

// At s[i]: the length of the valid UTF-8 sequence there (1 to 4; overlong forms, surrogates and code
// points above U+10FFFF are invalid, as in Unicode's definition), or 0 and in `subpart` the length
// of the maximal subpart (the longest start of a valid sequence, at least 1 byte) that one U+FFFD
// replaces: Unicode's recommended practice, which Python's errors="replace", ICU and the WHATWG
// encoding standard follow ("\xE6\x97" is one U+FFFD, "\x80\x80" two).
size_t utf8_length(std::string_view s, size_t i, size_t& subpart) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  subpart = 1;
  if (c < 0x80) return 1;
  size_t n;
  uint32_t lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) return 0;
    const unsigned char v = b(i + k);
    if (k == 1 ? (v < lo || v > hi) : (v & 0xC0) != 0x80) return 0;
    subpart = k + 1;
  }
  return n;
}

}  // namespace

std::string printable(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    size_t subpart = 1;
    const size_t n = utf8_length(bytes, i, subpart);
    if (n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD, one per maximal subpart
      i += subpart;
    }
  }
  return out;
}

}  // namespace mixtrain::text
