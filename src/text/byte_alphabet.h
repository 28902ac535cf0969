// GPT-2's byte alphabet (its bytes_to_unicode): every byte as a printable character, the form in
// which vocab.json and merges.txt spell tokens. Bytes 33..126, 161..172 and 174..255 are the code
// point of the same number; the other 68 bytes (controls, space, 127..160, 173) are U+0100, U+0101,
// ... in byte order, so that the space is U+0120 'Ġ' and '\n' is U+010A 'Ċ'.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mixtrain::text {

// The UTF-8 spelling of `bytes` in the alphabet.
std::string to_alphabet(std::string_view bytes);
// The bytes a spelling stands for; nullopt when it is not valid UTF-8 or holds a character outside
// the alphabet.
std::optional<std::string> from_alphabet(std::string_view spelling);

}  // namespace mixtrain::text
