// safe_cut(): where a text can be cut into two that encode independently (tokenizer.h).
//
// The rule: p is a cut when text[p - 1] and text[p + 1] are printable non-space ASCII (0x21..0x7E)
// and text[p] is ' ' or '\n'. Why this is safe for GPT-2's expression
//   '(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (X = text[p - 1], W = text[p], Y = text[p + 1]):
//  1. No piece of the whole text holds both X and W. A space may stand only first in the three
//     " ?" alternatives, and the whitespace alternatives hold whitespace only; X is not whitespace.
//     '\n' is in no class but \s. So a piece ends at p.
//  2. The pieces from p on are those of text[p, ) alone. Matching restarts at p either way, and the
//     expression has no lookbehind, anchor or \b that could see before p. At p: for W = ' ' one of the
//     " ?" alternatives takes " Y..." (Y is a letter, a number or other: not \s); for W = '\n' the
//     contraction and " ?" alternatives fail, `\s+(?!\S)` fails (the run is "\n" alone and Y
//     follows), `\s+` takes "\n". Both only ever look at text from p on.
//  3. The pieces before p are those of text[0, p) alone. Each match attempt that ends before p sees
//     the same bytes; one that would read text[p] does so only to end a run (`\p{L}+`, `\p{N}+`,
//     `[^\s\p{L}\p{N}]+` stop at W as they stop at the end of the text), to try a contraction's
//     letter after "'" (W is none, the end is none either), or through the lookahead `(?!\S)` of a
//     whitespace run — but a whitespace run cannot end at p, because X is not whitespace.
// The byte right after '\n' is not a safe cut in general: in "x\n\ny" the whole text gives the
// pieces "\n", "\n" (`\s+(?!\S)` gives back the last "\n" so that it is not followed by y, and `\s+`
// takes that one), while "x\n\n" alone ends in the one piece "\n\n" (nothing follows). The rule's bytes are
// ASCII, so the invalid-UTF-8 runs (tokenizer.h) never straddle a cut either, and a special token
// whose text has no ' ' or '\n' cannot straddle one.
#include "mixtrain/text/tokenizer.h"

namespace mixtrain::text {

size_t safe_cut(std::string_view text) {
  const auto visible = [](char c) { return c >= 0x21 && c <= 0x7E; };
  for (size_t p = text.size() >= 2 ? text.size() - 2 : 0; p >= 1; --p) {
    const char w = text[p];
    if ((w == ' ' || w == '\n') && visible(text[p - 1]) && visible(text[p + 1])) return p;
  }
  return 0;
}

}  // namespace mixtrain::text
