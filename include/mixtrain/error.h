// mixtrain/error.h: the two error channels.
//
// User and API errors (bad shapes, dtypes, devices, indices, files) throw mt::Error through
// MT_CHECK. The message names the op, the shapes and dtypes involved and what would be valid.
// Broken internal invariants use MT_INTERNAL_ASSERT, which also throws (never aborts: a library
// must not kill its host process) but marks the message as a bug report.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace mixtrain {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {

// Streams every argument into one string; anything with operator<< works (shapes, dtypes).
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

// `text` from an untrusted source (a file, the environment, the command line) made safe to print
// inside a message: in double quotes, with quotes, backslashes and control or non-ASCII bytes
// escaped (\n, \xNN), and cut to `max_chars` bytes of input with "..." after it.
std::string quote_untrusted(std::string_view text, size_t max_chars = 64);
// The same escaping without quotes or a length limit: for printing names and values from a file on
// a terminal (no forged lines, no escape sequences).
std::string escape_untrusted(std::string_view text);

[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);
[[noreturn]] void throw_internal(const char* file, int line, const char* cond, const std::string& msg);

}  // namespace detail
}  // namespace mixtrain

// MT_CHECK(cond, parts...): throws mt::Error("parts...") when cond is false.
#define MT_CHECK(cond, ...)                                                                       \
  do {                                                                                            \
    if (!(cond)) [[unlikely]]                                                                     \
      ::mixtrain::detail::throw_error(__FILE__, __LINE__, ::mixtrain::detail::concat(__VA_ARGS__)); \
  } while (0)

// MT_FAIL(parts...): unconditional user error.
#define MT_FAIL(...) ::mixtrain::detail::throw_error(__FILE__, __LINE__, ::mixtrain::detail::concat(__VA_ARGS__))

// MT_INTERNAL_ASSERT(cond, parts...): a bug in mixtrain, not in the caller's code.
#define MT_INTERNAL_ASSERT(cond, ...)                                                    \
  do {                                                                                   \
    if (!(cond)) [[unlikely]]                                                            \
      ::mixtrain::detail::throw_internal(__FILE__, __LINE__, #cond,                      \
                                         ::mixtrain::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
