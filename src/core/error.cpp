#include "mixtrain/error.h"

#include <algorithm>

namespace mixtrain::detail {

std::string escape_untrusted(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c >= 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string quote_untrusted(std::string_view text, size_t max_chars) {
  std::string out(1, '"');
  out += escape_untrusted(text.substr(0, std::min(text.size(), max_chars)));
  out += '"';
  if (text.size() > max_chars) out += "...";
  return out;
}

// User errors carry only the message: the file and line of the check mean nothing to a caller.
void throw_error(const char* /*file*/, int /*line*/, const std::string& msg) { throw Error(msg); }

void throw_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(concat("internal error (a bug in mixtrain, please report it): ", cond, " failed at ", file,
                     ":", line, msg.empty() ? "" : ": ", msg));
}

}  // namespace mixtrain::detail
