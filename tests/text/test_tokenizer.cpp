// The byte-level BPE tokenizer on a small vocabulary of the tests' own (tokenizer_fixture.h): every
// file layout gives the same ids, hand-worked examples, decode(encode(x)) == x for any bytes, special
// tokens, the safe cut, and save_pretrained's round trip.
#include <gtest/gtest.h>

#include <random>

#include "mixtrain/text/tokenizer.h"
#include "support/expect_error.h"
#include "text/byte_alphabet.h"
#include "text/pretokenizer.h"
#include "text/tokenizer_fixture.h"

namespace mt = mixtrain;
using mt::testing::BpeFixture;
using mt::testing::TempDir;
using mt::text::Specials;
using mt::text::Tokenizer;
using mt::text::TokenId;

namespace {

std::vector<std::string> pieces(std::string_view text) {
  mt::text::PreTokenizer pre;
  std::vector<std::string> out;
  pre.split(text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

// Texts over an alphabet that hits the fixture's merges, whitespace runs, digits, UTF-8 and invalid bytes.
std::string random_text(std::mt19937& rng, size_t max_len) {
  static const std::vector<std::string> atoms = {
      "a", "h", "e", "t", "r", "i", "n", "g", "o", "l", "w", "d", "s", "T", " ", " ", " ", "  ", "\n", "\n\n", "\t",
      "1", "2", "3", "'", "'s", "'ll", ".", "!", "é", "你", "\xF0\x9F\x91\x8B", "\xCC\x81", "\xFF", "\xFE", "\x80",
      "\xC3", "<|endoftext|>", "the", " the", " world", "\r\n", "\xC2\xA0", "\xE3\x80\x80"};
  std::uniform_int_distribution<size_t> len(0, max_len), pick(0, atoms.size() - 1);
  std::string s;
  const size_t n = len(rng);
  for (size_t i = 0; i < n; ++i) s += atoms[pick(rng)];
  return s;
}

class TokenizerTest : public ::testing::Test {
 protected:
  BpeFixture fx;
  TempDir dir;
};

}  // namespace

TEST(ByteAlphabet, MatchesGpt2BytesToUnicode) {
  EXPECT_EQ(mt::text::to_alphabet(" "), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(mt::text::to_alphabet("\n"), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(mt::text::to_alphabet(std::string(1, '\0')), "\xC4\x80");  // U+0100
  EXPECT_EQ(mt::text::to_alphabet("\x7F"), "\xC4\xA1");  // U+0121: the first after the 33 controls and space
  EXPECT_EQ(mt::text::to_alphabet("\xAD"), "\xC5\x83");  // U+0143: the last of the 68
  EXPECT_EQ(mt::text::to_alphabet("A~"), "A~");
  EXPECT_EQ(mt::text::to_alphabet("\xA1\xFF"), "\xC2\xA1\xC3\xBF");  // same code points
  for (int b = 0; b < 256; ++b) {
    const std::string s(1, static_cast<char>(b));
    EXPECT_EQ(mt::text::from_alphabet(mt::text::to_alphabet(s)), s) << b;
  }
  EXPECT_FALSE(mt::text::from_alphabet("\xC4\xA0\xC5\x84").has_value());  // U+0144 is past the alphabet
  EXPECT_FALSE(mt::text::from_alphabet("\xC2\xAD").has_value());          // U+00AD (soft hyphen) is remapped
  EXPECT_FALSE(mt::text::from_alphabet(" ").has_value());                 // the space itself is not in it
}

TEST(PreTokenizer, SplitsLikeGpt2sExpression) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("Hello world's 123 4567!!  ok?"), (V{"Hello", " world", "'s", " 123", " 4567", "!!", " ", " ok", "?"}));
  // Contractions are lowercase only.
  EXPECT_EQ(pieces("I'll we've they're don't DON'T"),
            (V{"I", "'ll", " we", "'ve", " they", "'re", " don", "'t", " DON", "'", "T"}));
  // \s+(?!\S) leaves the last space of a run for the next word; a run at the end stays whole.
  EXPECT_EQ(pieces("a  \n  b"), (V{"a", "  \n ", " b"}));
  EXPECT_EQ(pieces("a   "), (V{"a", "   "}));
  EXPECT_EQ(pieces("x\n\ny"), (V{"x", "\n", "\n", "y"}));
  EXPECT_EQ(pieces("x\n\n"), (V{"x", "\n\n"}));
  // Scripts: letters of any script, digits of any script, symbols; a combining mark is not a letter.
  EXPECT_EQ(pieces("h\xC3\xA9llo \xD0\xBC\xD0\xB8\xD1\x80 \xE4\xBD\xA0\xE5\xA5\xBD"),
            (V{"h\xC3\xA9llo", " \xD0\xBC\xD0\xB8\xD1\x80", " \xE4\xBD\xA0\xE5\xA5\xBD"}));
  EXPECT_EQ(pieces(" \xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD e\xCC\x81"), (V{" \xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD", " e", "\xCC\x81"}));
  EXPECT_EQ(pieces("x\xC2\xBD\xD9\xA3"), (V{"x", "\xC2\xBD\xD9\xA3"}));  // ½ (No) and Arabic-Indic 3 (Nd)
  // Unicode whitespace: U+00A0 and U+3000 are \s, but only U+0020 joins the word after it.
  EXPECT_EQ(pieces("a\xC2\xA0\xE3\x80\x80" "b"), (V{"a", "\xC2\xA0", "\xE3\x80\x80", "b"}));
  // Invalid UTF-8: each run no match covers is one piece, and no piece crosses it.
  EXPECT_EQ(pieces("ab\xFF\xFE" "cd \x80"), (V{"ab", "\xFF\xFE", "cd", " ", "\x80"}));
  EXPECT_EQ(pieces("\xC3" "a\xE4\xBD"), (V{"\xC3", "a", "\xE4\xBD"}));
  EXPECT_TRUE(pieces("").empty());
}

TEST(PreTokenizer, LongRunsDoNotOverflowTheStack) {
  const std::string spaces(1 << 20, ' ');
  EXPECT_EQ(pieces(spaces + "x"), (std::vector<std::string>{std::string((1 << 20) - 1, ' '), " x"}));
  const std::string letters(1 << 20, 'a');
  EXPECT_EQ(pieces(letters).size(), 1u);
  const std::string invalid(1 << 16, '\xFF');
  EXPECT_EQ(pieces(invalid + "a" + invalid).size(), 3u);
}

TEST_F(TokenizerTest, EveryLayoutGivesTheSameIds) {
  std::vector<Tokenizer> toks;
  toks.push_back(Tokenizer::load(fx.write_vocab_merges(dir)));
  for (bool sequence : {false, true})
    for (bool pairs : {false, true}) toks.push_back(Tokenizer::load(fx.write_tokenizer_json(dir, sequence, pairs)));
  toks.push_back(Tokenizer::load(fx.write_tiktoken(dir)));
  std::filesystem::create_directories(dir.file("json-dir"));
  mt::testing::write_bytes(dir.file("json-dir/tokenizer.json"), fx.tokenizer_json(true, false).dump());
  toks.push_back(Tokenizer::load(dir.file("json-dir")));
  for (const Tokenizer& t : toks) {
    EXPECT_EQ(t.vocab_size(), fx.eot + 1) << t.describe();
    EXPECT_EQ(t.end_of_text(), fx.eot) << t.describe();
  }
  EXPECT_EQ(toks[0].describe(), "byte-level BPE, 293 tokens (vocab.json + merges.txt)");
  EXPECT_EQ(toks[1].describe(), "byte-level BPE, 293 tokens (tokenizer.json)");
  EXPECT_EQ(toks[5].describe(), "byte-level BPE, 293 tokens (tiktoken)");
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    const std::string text = random_text(rng, i < 250 ? 20 : 200);
    const std::vector<TokenId> ref = fx.reference_encode(text);
    for (const Tokenizer& t : toks) {
      ASSERT_EQ(t.encode(text), ref) << t.describe() << " on " << mt::detail::quote_untrusted(text, 400);
      ASSERT_EQ(t.decode(ref), text);
    }
  }
}

TEST_F(TokenizerTest, HandWorkedIds) {
  const Tokenizer t = Tokenizer::load(fx.write_vocab_merges(dir));
  auto ids = [&](std::initializer_list<const char*> toks) {
    std::vector<TokenId> v;
    for (const char* s : toks) v.push_back(fx.id(s));
    return v;
  };
  EXPECT_EQ(t.encode(" the"), ids({" the"}));
  EXPECT_EQ(t.encode("the"), ids({"t", "he"}));  // (h, e) ranks before (t, h)
  EXPECT_EQ(t.encode("hello world"), ids({"he", "ll", "o", " world"}));
  EXPECT_EQ(t.encode("I'll"), ids({"I", "'ll"}));
  EXPECT_EQ(t.encode("water"), ids({"w", "a", "ter"}));
  EXPECT_EQ(t.encode("    "), ids({"    "}));
  // Pieces "a", "  \n ", " b": (" ", " ") merges before ("\n", " ").
  EXPECT_EQ(t.encode("a  \n  b"), ids({"a", "  ", "\n ", " ", "b"}));
  EXPECT_EQ(t.encode("aaa"), ids({"aa", "a"}));  // the leftmost of equal ranks
  EXPECT_EQ(t.encode("aaaaa"), ids({"aa", "aa", "a"}));
  EXPECT_EQ(t.encode("123456"), ids({"123", "4", "5", "6"}));
  EXPECT_EQ(t.encode("caf\xC3\xA9"), ids({"c", "a", "f", "\xC3\xA9"}));
  EXPECT_EQ(t.encode("\xE4\xBD\xA0"), ids({"\xE4\xBD\xA0"}));  // merged through a merge listed after it
  EXPECT_EQ(t.encode("\xFF\xFE\xFF"), ids({"\xFF\xFE", "\xFF"}));
  EXPECT_EQ(t.encode("x\xFF\xFEx"), ids({"x", "\xFF\xFE", "x"}));
  EXPECT_TRUE(t.encode("").empty());
  // Long pieces (the heap path): 200 spaces, then 101 a's.
  EXPECT_EQ(t.encode(std::string(200, ' ')), std::vector<TokenId>(50, fx.id("    ")));
  std::vector<TokenId> as(50, fx.id("aa"));
  as.push_back(fx.id("a"));
  EXPECT_EQ(t.encode(std::string(101, 'a')), as);
}

TEST_F(TokenizerTest, DecodeGivesBackAnyBytes) {
  const Tokenizer t = Tokenizer::load(fx.write_tiktoken(dir));
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> byte(0, 255), len(0, 300);
  for (int i = 0; i < 500; ++i) {
    std::string s(static_cast<size_t>(len(rng)), '\0');
    for (char& c : s) c = static_cast<char>(i % 2 ? byte(rng) : " ahe\n\xFF"[byte(rng) % 6]);
    const std::vector<TokenId> ids = t.encode(s);
    ASSERT_EQ(t.decode(ids), s);
    ASSERT_EQ(ids, fx.reference_encode(s));
    std::vector<int64_t> wide(ids.begin(), ids.end());
    ASSERT_EQ(t.decode(wide), s);
  }
  EXPECT_MT_ERROR(t.decode(std::vector<TokenId>{5, fx.eot + 1}), "token id 293", "outside the vocabulary [0, 293)");
  EXPECT_MT_ERROR(t.decode(std::vector<int64_t>{-1}), "token id -1");
  EXPECT_MT_ERROR(t.token_bytes(100000), "token id 100000");
  EXPECT_EQ(t.token_bytes(fx.eot), "<|endoftext|>");
  EXPECT_EQ(t.token_bytes(fx.id(" the")), " the");
}

TEST_F(TokenizerTest, SpecialTokens) {
  const Tokenizer t = Tokenizer::load(fx.write_tokenizer_json(dir, false, false));
  const std::string text = "a<|endoftext|> the<|endoftext|><|endoftext|>";
  std::vector<TokenId> recognized = {fx.id("a"), fx.eot, fx.id(" the"), fx.eot, fx.eot};
  EXPECT_EQ(t.encode(text, Specials::kRecognize), recognized);
  const std::vector<TokenId> plain = t.encode(text);  // as text: "<|", "endoftext", "|><|", ...
  EXPECT_EQ(std::count(plain.begin(), plain.end(), fx.eot), 0);
  EXPECT_EQ(plain, fx.reference_encode(text));
  EXPECT_EQ(t.decode(recognized), text);
  EXPECT_EQ(t.decode(plain), text);
  EXPECT_EQ(t.special_token("<|endoftext|>"), fx.eot);
  EXPECT_FALSE(t.special_token("<|im_start|>").has_value());
  // A partial special is text.
  EXPECT_EQ(t.encode("<|endoftext|", Specials::kRecognize), fx.reference_encode("<|endoftext|"));
}

TEST_F(TokenizerTest, SafeCutSplitsWithoutChangingIds) {
  using mt::text::safe_cut;
  EXPECT_EQ(safe_cut(""), 0u);
  EXPECT_EQ(safe_cut("a b"), 1u);
  EXPECT_EQ(safe_cut("a b c"), 3u);
  EXPECT_EQ(safe_cut("a bc"), 1u);
  EXPECT_EQ(safe_cut("a\nb"), 1u);
  EXPECT_EQ(safe_cut("a  b"), 0u);    // a run of spaces: not here
  EXPECT_EQ(safe_cut("a b "), 1u);    // the last byte cannot be the middle one
  EXPECT_EQ(safe_cut("\xC3\xA9 b"), 0u);  // non-ASCII before
  const Tokenizer t = Tokenizer::load(fx.write_tiktoken(dir));
  std::mt19937 rng(3);
  int cuts = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::string text = random_text(rng, 40);
    std::string prefix = text.substr(0, std::uniform_int_distribution<size_t>(0, text.size())(rng));
    const size_t p = safe_cut(prefix);
    if (p == 0) continue;
    ++cuts;
    ASSERT_LT(p, prefix.size());
    std::vector<TokenId> joined = t.encode(text.substr(0, p));
    t.encode_append(text.substr(p), joined);
    ASSERT_EQ(joined, t.encode(text)) << mt::detail::quote_untrusted(text, 400) << " cut at " << p;
  }
  EXPECT_GT(cuts, 200);
}

TEST_F(TokenizerTest, SavePretrainedRoundTrips) {
  for (const std::string& src : {fx.write_vocab_merges(dir), fx.write_tiktoken(dir), fx.write_tokenizer_json(dir, true, true)}) {
    const Tokenizer a = Tokenizer::load(src);
    const std::string out = dir.file("saved-" + std::to_string(src.size()));
    a.save_pretrained(out, 1024);
    const Tokenizer b = Tokenizer::load(out);
    EXPECT_EQ(b.vocab_size(), a.vocab_size());
    EXPECT_EQ(b.end_of_text(), a.end_of_text());
    for (TokenId id = 0; id < a.vocab_size(); ++id) ASSERT_EQ(b.token_bytes(id), a.token_bytes(id));
    std::mt19937 rng(5);
    for (int i = 0; i < 200; ++i) {
      const std::string text = random_text(rng, 60);
      ASSERT_EQ(b.encode(text), a.encode(text));
      ASSERT_EQ(b.encode(text, Specials::kRecognize), a.encode(text, Specials::kRecognize));
    }
    const std::string config = mt::testing::read_bytes(out + "/tokenizer_config.json");
    EXPECT_NE(config.find("\"tokenizer_class\": \"GPT2Tokenizer\""), std::string::npos);
    EXPECT_NE(config.find("\"model_max_length\": 1024"), std::string::npos);
    EXPECT_NE(config.find("\"eos_token\": \"<|endoftext|>\""), std::string::npos);
    EXPECT_EQ(mt::testing::read_bytes(out + "/merges.txt").substr(0, 14), "#version: 0.2\n");
  }
  // Hugging Face's files are written back as they were read.
  const Tokenizer hf = Tokenizer::load(dir.file("hf"));
  hf.save_pretrained(dir.file("hf-again"), 64);
  EXPECT_EQ(mt::testing::read_bytes(dir.file("hf-again/merges.txt")), fx.merges_txt());
  EXPECT_EQ(nlohmann::json::parse(mt::testing::read_bytes(dir.file("hf-again/vocab.json"))), fx.vocab_json());
}

TEST(Printable, ReplacesInvalidUtf8) {
  EXPECT_EQ(mt::text::printable("ab\xC3\xA9"), "ab\xC3\xA9");
  EXPECT_EQ(mt::text::printable("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(mt::text::printable("\xC3"), "\xEF\xBF\xBD");
  EXPECT_EQ(mt::text::printable("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(mt::text::printable("\xF0\x9F\x91\x8B"), "\xF0\x9F\x91\x8B");
  // One U+FFFD per maximal subpart (Unicode's recommended practice; Python's errors="replace"):
  // a truncated sequence is one, stray continuation bytes one each, a lead byte past U+10FFFF one.
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(mt::text::printable("\xE6\x97"), r);
  EXPECT_EQ(mt::text::printable("\xE6\x97" "A"), r + "A");
  EXPECT_EQ(mt::text::printable("\xF0\x9F\x91"), r);
  EXPECT_EQ(mt::text::printable("\x80\x80"), r + r);
  EXPECT_EQ(mt::text::printable("\xF4\x90\x80\x80"), r + r + r + r);
  EXPECT_EQ(mt::text::printable("\xC0\xAF"), r + r);
}
