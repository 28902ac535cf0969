// Bounded JSON parsing of file contents (see json_input.h).
#include "io/json_input.h"

#include <set>
#include <vector>

#include "mixtrain/error.h"

namespace mixtrain::io {

using json = nlohmann::json;

namespace {
// The parser's own message, which quotes input: long enough for "syntax error while parsing object -
// unexpected ...; expected ..." and a short token.
constexpr size_t kMaxQuotedParserMessage = 200;
}  // namespace

json parse_untrusted_json(std::string_view text, int max_depth, const JsonFail& fail) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  auto guard = [&](int depth, json::parse_event_t event, json& value) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        // depth counts the containers already open around this one.
        if (depth >= max_depth)
          fail(0, detail::concat("JSON nests deeper than ", max_depth, max_depth == 1 ? " level" : " levels"));
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end: keys.pop_back(); break;
      case json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(value.get<std::string>()).second)
          fail(0, "duplicate key " + detail::quote_untrusted(value.get<std::string>()) + " in a JSON object");
        break;
      default: break;
    }
    return true;
  };
  // nlohmann's messages start with "[json.exception.parse_error.101] " and quote the offending token
  // whole (a 100,000-digit number): keep what follows the tag, bounded and escaped.
  auto reason = [](const json::exception& e) {
    std::string msg = e.what();
    if (auto p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
    const bool cut = msg.size() > kMaxQuotedParserMessage;
    return "invalid JSON: " + detail::escape_untrusted(msg.substr(0, kMaxQuotedParserMessage)) + (cut ? "..." : "");
  };
  // nlohmann's lexer takes a NUL byte for the end of the input, so "{...}\0garbage" would parse as
  // "{...}". JSON has no raw NUL anywhere (in strings it must be escaped): refuse it outright, so that
  // only whitespace may follow the top-level value.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    fail(nul, "invalid JSON: a NUL byte (only whitespace may follow the value, and strings escape NUL as \\u0000)");
  try {
    return json::parse(text.begin(), text.end(), guard);
  } catch (const json::parse_error& e) {
    fail(e.byte > 0 ? e.byte - 1 : 0, reason(e));  // e.byte is 1-based
  } catch (const json::exception& e) {
    // Raised mid-parse without a position: a number past double's range (out_of_range.406)
    // and anything else nlohmann may add. Reported at the start of the text.
    fail(0, reason(e));
  }
  return {};  // not reached: fail throws
}

std::string describe_json(const json& v) {
  switch (v.type()) {
    case json::value_t::string: return detail::quote_untrusted(v.get_ref<const std::string&>());
    case json::value_t::array: return detail::concat("an array of ", v.size(), v.size() == 1 ? " value" : " values");
    case json::value_t::object:
      return detail::concat("an object of ", v.size(), v.size() == 1 ? " entry" : " entries");
    case json::value_t::discarded: return "nothing";
    default: return v.dump();  // null, boolean, numbers: short
  }
}

}  // namespace mixtrain::io
