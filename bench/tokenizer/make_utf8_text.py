#!/usr/bin/env python3
"""Deterministic generator of a UTF-8-heavy text for GPT-2 BPE tokenizer parity tests.

Usage: python3 make_utf8_text.py [--out FILE] [--seed N] [--target-bytes N]
(defaults: --out /tmp/corpus/utf8-heavy.txt, --seed 20240520, --target-bytes
600000 -> ~600 KB).  Written in binary mode, so "\r\n" / lone "\r" survive:
readers must not use Python's universal-newline text mode (use
open(path, "rb").read().decode("utf-8") or open(..., newline="")).
Same seed + same target => byte-identical output (pure stdlib `random.Random`, no hash-order dependence).

What the text covers (each "paragraph" is one seeded-random pick of the
generators below, joined by a seeded-random separator):

  * scripts: Latin (ASCII + precomposed accents), Greek, Cyrillic, Arabic,
    Hebrew (with niqqud), Devanagari (with viramas / matras), Thai (no spaces),
    CJK ideographs (no spaces), Hiragana/Katakana, Hangul syllables, and
    mixed-script words glued together without spaces;
  * emoji: single code points, skin-tone modifiers (U+1F3FB..U+1F3FF),
    ZWJ sequences (families, professions, rainbow flag), keycaps (#\uFE0F\u20E3),
    regional-indicator flags, variation selectors (U+FE0E / U+FE0F);
  * combining marks: decomposed accents (NFD, e.g. "e\u0301"), Zalgo-like
    stacks of 5-30 combining marks on one base, combining marks after a space
    or at the very start of a line;
  * digits: ASCII, Arabic-Indic (U+0660..), Extended Arabic-Indic (U+06F0..),
    Devanagari (U+0966..), Thai (U+0E50..), fullwidth (U+FF10..), mixed runs,
    numbers with separators (1,234.56 / 1 234 / 12'345), long digit runs;
  * whitespace: tabs, "\r\n", lone "\r", U+00A0, U+2003, U+3000, U+2028,
    U+2029, U+0085, U+000B, U+000C, U+200B (not whitespace for \\s but
    invisible), runs of mixed whitespace, trailing whitespace before newlines,
    multiple blank lines, whitespace before letters/digits/punctuation;
  * contractions in odd places: "'s", "'S", "'LL", "’s" (U+2019), "'" at word
    start / end / doubled, "''s", contractions after digits, after non-Latin
    letters, after spaces, quotes around words;
  * long runs of one character (letters, spaces, newlines, "=", "-", emoji,
    a CJK ideograph, a combining mark), up to several KB;
  * code snippets (C++, Python, JSON, shell, HTML) with indentation, tabs,
    operators and string literals containing escapes and non-ASCII;
  * a few literal "<|endoftext|>"-LIKE strings are deliberately NOT emitted
    verbatim: only broken variants such as "<|endoftext|" and "< |endoftext|>"
    appear, so a tokenizer that treats the special string as text and one that
    treats it as the special token both agree on this corpus.

The output is checked to be valid UTF-8 (strict round-trip) before writing; no
surrogates and no U+FFFE/U+FFFF noncharacters are produced.
"""

import argparse
import random
import sys

# ----------------------------------------------------------------------------
# Material

LATIN_WORDS = (
    "the quick brown fox jumps over lazy dog naïve café résumé façade "
    "coöperate Übermaßig straße Ærøskøbing Łódź Dvořák São Paulo El Niño "
    "garçon jalapeño piñata œuvre Ångström Þórr Ðuro fjörður HELLO World "
    "McDonald O'Brien don't can't won't it's they're we've I'm you'd she'll"
).split()

GREEK = (
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο. "
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Ἐν ἀρχῇ ἦν ὁ λόγος, καὶ ὁ λόγος ἦν πρὸς τὸν θεόν. "
    "ΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩ αβγδεζηθικλμνξοπρστυφχψω ς"
).split()
CYRILLIC = (
    "Съешь же ещё этих мягких французских булок да выпей чаю. "
    "В чащах юга жил бы цитрус? Да, но фальшивый экземпляр! "
    "Ґанок Їжак Єнот Ўладзімір Ђорђе Љубљана ЁЛКА ёлка Щука ЪЫЬЭЮЯ"
).split()
ARABIC = (
    "صِفْ خَلْقَ خَوْدٍ كَمِثْلِ الشَّمْسِ إِذْ بَزَغَتْ يَحْظَى الضَّجِيعُ بِهَا نَجْلَاءَ مِعْطَارِ "
    "العربية لغة جميلة والكتابة من اليمين إلى اليسار مع تشكيل ﷲ ﻻ"
).split()
HEBREW = (
    "דג סקרן שט בים מאוכזב ולפתע מצא חברה "
    "בְּרֵאשִׁית בָּרָא אֱלֹהִים אֵת הַשָּׁמַיִם וְאֵת הָאָרֶץ שָׁלוֹם"
).split()
DEVANAGARI = (
    "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले "
    "विष्णुवतार भगवान श्रीराम अयोध्या के महाराज दशरथ के बड़े सपुत्र थे। "
    "क्षत्रिय ज्ञान श्र द्ध हिन्दी संस्कृत ॐ"
).split()
THAI = [
    "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า",
    "กว่าบรรดาฝูงสัตว์เดรัจฉาน",
    "จงฝ่าฟันพัฒนาวิชาการ",
    "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
    "ฤๅษีเฒ่าฃฅ",
]
CJK = [
    "天地玄黃宇宙洪荒日月盈昃辰宿列張",
    "我能吞下玻璃而不伤身体",
    "漢字文化圏の文字体系は複雑である",
    "中華人民共和國萬歲𠀀𠀁𪚥",  # includes astral-plane ideographs
    "いろはにほへとちりぬるを",
    "イロハニホヘトチリヌルヲワカヨタレソ",
    "ｶﾀｶﾅﾊﾝｶｸ",  # halfwidth katakana
]
HANGUL = (
    "키스의 고유조건은 입술끼리 만나야 하고 특별한 기술은 필요치 않다 "
    "다람쥐 헌 쳇바퀴에 타고파 한국어 각"
    ).split() + ["\u1100\u1161\u11a8\u1112\u1161\u11ab"]  # + conjoining jamo (NFD Hangul)

EMOJI_SINGLE = list("😀😂🤣😍🤔🙃🔥💯🚀🌍🍕🎉✅❌⭐☕⚡🐍🦀🧠📈🗿🫠🫡")
SKIN = ["\U0001F3FB", "\U0001F3FC", "\U0001F3FD", "\U0001F3FE", "\U0001F3FF"]
SKIN_BASES = ["👋", "👍", "🤙", "✋", "🧑", "👩", "👨", "🙏", "💪"]
ZWJ = "\u200d"
ZWJ_SEQS = [
    "👨" + ZWJ + "👩" + ZWJ + "👧" + ZWJ + "👦",
    "👩" + ZWJ + "❤\ufe0f" + ZWJ + "💋" + ZWJ + "👨",
    "🏳\ufe0f" + ZWJ + "🌈",
    "🏴" + ZWJ + "☠\ufe0f",
    "🧑" + "\U0001F3FD" + ZWJ + "💻",
    "👩" + "\U0001F3FF" + ZWJ + "🚀",
    "🐻" + ZWJ + "❄\ufe0f",
    "🧔" + "\U0001F3FB" + ZWJ + "♂\ufe0f",
]
FLAGS = ["🇺🇸", "🇯🇵", "🇩🇪", "🇧🇷", "🇮🇳", "🇺🇦", "🇪🇺"]
KEYCAPS = ["#\ufe0f\u20e3", "1\ufe0f\u20e3", "*\ufe0f\u20e3", "9\u20e3"]
VS_TEXT = ["☺\ufe0e", "☺\ufe0f", "♥\ufe0e", "♥\ufe0f", "©\ufe0f", "™"]

COMBINING = [chr(c) for c in range(0x0300, 0x0370)] + [chr(c) for c in range(0x0483, 0x0488)]
NFD_WORDS = [
    "e\u0301cole", "re\u0301sume\u0301", "nai\u0308ve", "Ame\u0301lie",
    "n\u0303", "A\u030a", "o\u0308\u0304", "Z\u030c", "c\u0327a", "u\u0308ber",
]

DIGITS = {
    "ascii": "0123456789",
    "arabic_indic": "".join(chr(0x0660 + i) for i in range(10)),
    "ext_arabic_indic": "".join(chr(0x06F0 + i) for i in range(10)),
    "devanagari": "".join(chr(0x0966 + i) for i in range(10)),
    "thai": "".join(chr(0x0E50 + i) for i in range(10)),
    "fullwidth": "".join(chr(0xFF10 + i) for i in range(10)),
    "bengali": "".join(chr(0x09E6 + i) for i in range(10)),
}
OTHER_NUMERIC = ["½", "¾", "²", "³", "Ⅻ", "ⅷ", "①", "⑳", "𝟘𝟙𝟚", "٫", "٬"]

WS_SINGLE = [
    " ", "  ", "\t", "\t\t", "\r\n", "\r", "\n", "\n\n", "\n\n\n", "\u00a0",
    "\u2003", "\u3000", "\u2028", "\u2029", "\u0085", "\u000b", "\u000c",
    "\u2009", "\u202f", "\u1680", "\u200b", " \t ", "\t \n", " \u00a0 ",
    "\u3000\u3000", " \r\n ", "   \n", "\t\r\n",
]

CONTRACTION_BITS = [
    "'s", "'S", "'t", "'T", "'re", "'RE", "'ve", "'VE", "'m", "'M", "'ll", "'LL",
    "'d", "'D", "\u2019s", "\u2019S", "\u2019ll", "''s", "'''", "'", "’",
    "'s'", "'ss", "'sx", "'llama", "'dx", "'ree", "'vee",
]
QUOTES = ['"', "'", "“", "”", "‘", "’", "«", "»", "„", "「", "」", "`"]
PUNCT = list(".,;:!?-–—…()[]{}<>/\\|@#$%^&*_+=~") + ["...", "?!", "!!!", "--", "->", "=>", "::", "&&"]

CODE_SNIPPETS = [
    "template <typename T>\nstruct Span {\n    T* data_;\n    std::size_t size_;\n"
    "    T& operator[](std::size_t i) { return data_[i]; }\n};\n",
    "int main(int argc, char** argv) {\n\tfor (int i = 0; i < argc; ++i) {\n"
    "\t\tstd::printf(\"%d: %s\\n\", i, argv[i]);\n\t}\n\treturn 0;\n}\n",
    "def tokenize(text: str) -> list[int]:\n    \"\"\"Encode ‘text’ → ids.\"\"\"\n"
    "    if not text:\n        return []\n    return [ord(c) % 50257 for c in text]  # naïve\n",
    "{\n  \"name\": \"gpt2\",\n  \"vocab_size\": 50257,\n  \"n_ctx\": 1024,\n"
    "  \"emoji\": \"\\ud83d\\ude00 😀\",\n  \"ratio\": 1.0e-5\n}\n",
    "#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do\n"
    "  wc -c \"$f\" | awk '{print $1}'   \n  echo \"done: ${f%.txt}\"\t\ndone\n",
    "<!DOCTYPE html>\n<html lang=\"ja\">\n  <body>\n    <p class='x'>こんにちは &amp; &#x1F600;</p>\n"
    "  </body>\n</html>\n",
    "    x = a**2 + b**2;    // Pythagoras   \r\n    y = (x >> 3) | 0xFF;\r\n"
    "    z = x != y ? x : y; /* ≠ */\r\n",
    "SELECT id, name FROM users WHERE name LIKE '%O''Brien%' AND age >= 18;\n",
]

# Broken variants only; the real special string is never emitted (see docstring).
ALMOST_SPECIAL = ["<|endoftext|", "< |endoftext|>", "<|endof text|>", "|endoftext|>", "<|ENDOFTEXT|>"]


# ----------------------------------------------------------------------------
# Generators; each takes the Random and returns a str

def g_words(r, pool, n_lo=5, n_hi=40, sep=" "):
    return sep.join(r.choice(pool) for _ in range(r.randint(n_lo, n_hi)))


def g_latin(r):
    out = []
    for _ in range(r.randint(10, 60)):
        w = r.choice(LATIN_WORDS)
        x = r.random()
        if x < 0.1:
            w = w.upper()
        elif x < 0.2:
            w = w.capitalize()
        out.append(w)
        if r.random() < 0.15:
            out.append(r.choice(PUNCT))
    return " ".join(out)


def g_script(r):
    pool = r.choice([GREEK, CYRILLIC, ARABIC, HEBREW, DEVANAGARI, HANGUL])
    return g_words(r, pool)


def g_nospace(r):
    pool = r.choice([THAI, CJK])
    return "".join(r.choice(pool) for _ in range(r.randint(2, 20))) + r.choice(["。", "、", "！", "？", ".", ""])


def g_mixed_script(r):
    pools = [LATIN_WORDS, GREEK, CYRILLIC, ARABIC, HEBREW, DEVANAGARI, HANGUL, THAI, CJK]
    parts = []
    for _ in range(r.randint(5, 30)):
        parts.append(r.choice(r.choice(pools)))
        parts.append(r.choice(["", "", " ", "-", "'s", "’s", r.choice(EMOJI_SINGLE), r.choice(DIGITS["ascii"])]))
    return "".join(parts)


def g_emoji(r):
    parts = []
    for _ in range(r.randint(3, 30)):
        k = r.random()
        if k < 0.3:
            e = r.choice(EMOJI_SINGLE)
        elif k < 0.5:
            e = r.choice(SKIN_BASES) + r.choice(SKIN)
        elif k < 0.7:
            e = r.choice(ZWJ_SEQS)
        elif k < 0.8:
            e = r.choice(FLAGS)
        elif k < 0.9:
            e = r.choice(KEYCAPS)
        else:
            e = r.choice(VS_TEXT)
        parts.append(e)
        parts.append(r.choice(["", "", " ", "  ", r.choice(LATIN_WORDS), " " + r.choice(LATIN_WORDS) + " "]))
    return "".join(parts)


def g_combining(r):
    k = r.random()
    if k < 0.4:
        return " ".join(r.choice(NFD_WORDS) for _ in range(r.randint(3, 20)))
    if k < 0.8:  # zalgo
        out = []
        for ch in r.choice(LATIN_WORDS + GREEK + CYRILLIC):
            out.append(ch + "".join(r.choice(COMBINING) for _ in range(r.randint(0, 30))))
        return "".join(out)
    # combining mark after whitespace / at line start / after digit / after punctuation
    return r.choice(COMBINING) + "start " + r.choice(["1", "!", " ", "\t", "'"]) + r.choice(COMBINING) * r.randint(1, 5) + " end"


def g_number(r):
    k = r.random()
    if k < 0.5:
        d = DIGITS[r.choice(sorted(DIGITS))]
        return "".join(r.choice(d) for _ in range(r.randint(1, 40)))
    if k < 0.7:  # mixed-script digit runs
        return "".join(r.choice(DIGITS[r.choice(sorted(DIGITS))]) for _ in range(r.randint(2, 30)))
    if k < 0.85:
        return r.choice([
            "1,234.56", "1 234 567", "12'345'678", "3.14159265358979", "-42", "+1e-10",
            "0x7fffffff", "2024-05-20", "12:34:56", "v1.2.3", "50256", "1\u00a0000", "٣٫١٤",
        ])
    return " ".join(r.choice(OTHER_NUMERIC) for _ in range(r.randint(1, 8)))


def g_whitespace(r):
    parts = []
    for _ in range(r.randint(3, 25)):
        parts.append(r.choice(WS_SINGLE))
        if r.random() < 0.6:
            parts.append(r.choice(LATIN_WORDS + GREEK + CJK + EMOJI_SINGLE + PUNCT + list(DIGITS["ascii"])))
    return "".join(parts)


def g_contractions(r):
    parts = []
    for _ in range(r.randint(5, 30)):
        base = r.choice(LATIN_WORDS + GREEK + CYRILLIC + HANGUL + list(DIGITS["ascii"]) + EMOJI_SINGLE + ["", " ", "  "])
        c = r.choice(CONTRACTION_BITS)
        q = r.choice(QUOTES)
        form = r.randint(0, 5)
        if form == 0:
            parts.append(base + c)
        elif form == 1:
            parts.append(c + base)
        elif form == 2:
            parts.append(q + base + q + c)
        elif form == 3:
            parts.append(base + " " + c + " ")
        elif form == 4:
            parts.append(c.upper() + c)
        else:
            parts.append(base + c + r.choice(WS_SINGLE))
    return " ".join(parts)


def g_run(r):
    ch = r.choice([
        "a", "Z", " ", "\n", "\t", "=", "-", "*", "0", "9", ".", "'", "😀", "漢", "\u0301",
        "\u00a0", "\u3000", "é", "ß", "\r\n", "ab", " a", "'s", "ы", "ก",
    ])
    n = r.choice([2, 3, 7, 16, 64, 100, 255, 256, 257, 1000, 4097])
    return ch * n


def g_code(r):
    s = r.choice(CODE_SNIPPETS)
    if r.random() < 0.3:
        s = s.replace("    ", "\t")
    return s


def g_almost_special(r):
    return " ".join(r.choice(ALMOST_SPECIAL + LATIN_WORDS) for _ in range(r.randint(3, 10)))


GENERATORS = [
    (g_latin, 10), (g_script, 10), (g_nospace, 6), (g_mixed_script, 6), (g_emoji, 8),
    (g_combining, 6), (g_number, 8), (g_whitespace, 8), (g_contractions, 8), (g_run, 3),
    (g_code, 5), (g_almost_special, 1),
]
SEPARATORS = ["\n", "\n\n", " ", "", "\r\n", "  \n", "\t\n", "\u2028", "\n\u3000", "\u0085"]


def make_text(seed, target_bytes):
    r = random.Random(seed)
    funcs = [g for g, _ in GENERATORS]
    weights = [w for _, w in GENERATORS]
    parts = []
    size = 0
    # Fixed preamble: one deterministic sample of every category, so even a
    # tiny --target-bytes covers everything.
    for g in funcs:
        s = g(r) + "\n"
        parts.append(s)
        size += len(s.encode("utf-8"))
    while size < target_bytes:
        s = r.choices(funcs, weights)[0](r) + r.choice(SEPARATORS)
        parts.append(s)
        size += len(s.encode("utf-8"))
    # end with trailing whitespace on purpose
    parts.append("trailing whitespace \t \u00a0\n  \n")
    return "".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="/tmp/corpus/utf8-heavy.txt")
    ap.add_argument("--seed", type=int, default=20240520)
    ap.add_argument("--target-bytes", type=int, default=600_000)
    a = ap.parse_args(argv)
    text = make_text(a.seed, a.target_bytes)
    assert "<|endoftext|>" not in text
    for c in text:
        o = ord(c)
        assert not (0xD800 <= o <= 0xDFFF) and (o & 0xFFFE) != 0xFFFE, hex(o)
    data = text.encode("utf-8", errors="strict")
    assert data.decode("utf-8", errors="strict") == text
    with open(a.out, "wb") as f:  # binary: keep \r\n etc. exactly
        f.write(data)
    print(f"wrote {a.out}: {len(data)} bytes, {len(text)} code points", file=sys.stderr)


if __name__ == "__main__":
    main()
