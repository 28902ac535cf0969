// JSON from files (safetensors headers, checkpoint metadata, metrics lines): parsed as hostile
// input, and never echoed unbounded into an error message. Internal to the library.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace mixtrain::io {

// Called with a byte position in the text (0-based; 0 when the parser gives none) and what is
// wrong; must throw (mt::Error naming the file and context).
using JsonFail = std::function<void(uint64_t position, const std::string& what)>;

// Parses `text` with containers nested at most `max_depth` deep (1: a flat object or array) and no
// key twice in any object (JSON parsers differ on which duplicate wins, so a file could mean one
// thing to mixtrain and another to a checker). Every problem goes to `fail`.
nlohmann::json parse_untrusted_json(std::string_view text, int max_depth, const JsonFail& fail);

// A value from such a file for an error message: scalars as JSON (strings quoted and escaped, cut
// at 64 bytes), containers by kind and size ("an array of 3 values"); never a recursive dump.
std::string describe_json(const nlohmann::json& value);

}  // namespace mixtrain::io
