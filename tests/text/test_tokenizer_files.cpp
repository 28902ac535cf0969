// Hostile tokenizer files: each rule of tokenizer.h refused with a one-line mt::Error that names the
// file and the problem (never a crash, a hang or a silently different tokenizer).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "mixtrain/text/tokenizer.h"
#include "support/expect_error.h"
#include "text/byte_alphabet.h"
#include "text/tokenizer_fixture.h"

namespace mt = mixtrain;
using json = nlohmann::json;
using mt::testing::BpeFixture;
using mt::testing::TempDir;
using mt::testing::write_bytes;
using mt::text::Tokenizer;

namespace {

class TokenizerFiles : public ::testing::Test {
 protected:
  BpeFixture fx;
  TempDir dir;

  // Expects load(path) to fail with every part in a one-line message that names the path.
  void expect_refused(const std::string& path, std::initializer_list<std::string> parts) {
    const mt::testing::Caught c = mt::testing::catch_error([&] { Tokenizer::load(path); });
    ASSERT_TRUE(c.is_mt_error) << c.message;
    EXPECT_EQ(c.message.find('\n'), std::string::npos) << c.message;
    for (const std::string& p : parts) EXPECT_NE(c.message.find(p), std::string::npos) << "'" << p << "' not in: " << c.message;
  }
  std::string tiktoken(const std::string& contents) {
    const std::string f = dir.file("t.tiktoken");
    write_bytes(f, contents);
    return f;
  }
  std::string tokenizer_json(const json& j) {
    const std::string f = dir.file("tokenizer.json");
    write_bytes(f, j.dump());
    return f;
  }
  std::string hf_dir(const std::string& vocab, const std::string& merges) {
    const std::string d = dir.file("hf");
    std::filesystem::create_directories(d);
    write_bytes(d + "/vocab.json", vocab);
    write_bytes(d + "/merges.txt", merges);
    return d;
  }
};

}  // namespace

TEST_F(TokenizerFiles, TiktokenRules) {
  const std::string good = fx.tiktoken();
  expect_refused(tiktoken(""), {"t.tiktoken", "no tokens"});
  expect_refused(tiktoken("QQ== 0\n!!!! 1\n"), {"t.tiktoken", "line 2", "invalid base64"});
  expect_refused(tiktoken("QR== 0\n"), {"line 1", "invalid base64"});  // non-zero padding bits
  expect_refused(tiktoken(good + "QQ== 999\n"), {"line 293", "listed twice"});
  expect_refused(tiktoken(good + "QUFB 5\n"), {"line 293", "rank 5 is given twice"});
  expect_refused(tiktoken(good + "QUFB x5\n"), {"line 293", "not a decimal number"});
  expect_refused(tiktoken(good + "QUFB 1048576\n"), {"line 293", "above the limit"});
  expect_refused(tiktoken(good + "QUFB 99999999999\n"), {"line 293", "above the limit"});  // past 32 bits
  expect_refused(tiktoken(good + "QUFB\n"), {"line 293", "base64 bytes"});
  expect_refused(tiktoken(good + BpeFixture::base64(std::string(300, 'x')) + " 400\n"), {"line 293", "longer than"});
  expect_refused(tiktoken(good + BpeFixture::base64(std::string(260, 'x')).substr(0, 344) + " 400\n"),
                 {"line 293", "a token of 258 bytes"});
  // A missing byte: drop the line of 'A'.
  std::string no_a;
  for (size_t i = 0; i < fx.tokens.size(); ++i)
    if (fx.tokens[i] != "A") no_a += BpeFixture::base64(fx.tokens[i]) + " " + std::to_string(i) + "\n";
  expect_refused(tiktoken(no_a), {"t.tiktoken", "the byte 0x41 has no token"});
}

TEST_F(TokenizerFiles, VocabAndMergesRules) {
  const std::string vocab = fx.vocab_json().dump(), merges = fx.merges_txt();
  expect_refused(hf_dir(vocab, merges + "zz q\n"), {"merges.txt", "line 38", "\"zz\", which is not in the vocabulary"});
  expect_refused(hf_dir(vocab, merges + "a b\n"), {"merges.txt", "line 38", "result \"ab\" is not in the vocabulary"});
  expect_refused(hf_dir(vocab, merges + "h e\n"), {"merges.txt", "line 38", "\"h e\" is listed twice"});
  expect_refused(hf_dir(vocab, merges + "h  e\n"), {"merges.txt", "line 38", "not two tokens"});
  expect_refused(hf_dir(vocab, merges + "\nh e\n"), {"merges.txt", "line 38", "not two tokens"});
  expect_refused(hf_dir(vocab, merges + std::string(5000, 'h') + " e\n"), {"merges.txt", "line 38", "longer than"});
  json v = fx.vocab_json();
  v["Ġzz"] = 5;
  expect_refused(hf_dir(v.dump(), merges), {"vocab.json", "the id 5 is given to two tokens"});
  v = fx.vocab_json();
  v["zz"] = -1;
  expect_refused(hf_dir(v.dump(), merges), {"vocab.json", "\"zz\"", "not a non-negative integer"});
  v = fx.vocab_json();
  v["zz"] = 1 << 20;
  expect_refused(hf_dir(v.dump(), merges), {"vocab.json", "above the limit"});
  v = fx.vocab_json();
  v["a b"] = 999;  // a space is not in the alphabet
  expect_refused(hf_dir(v.dump(), merges), {"vocab.json", "not spelled in GPT-2's byte alphabet"});
  v = fx.vocab_json();
  v[std::string(257, 'x')] = 999;
  expect_refused(hf_dir(v.dump(), merges), {"vocab.json", "257 bytes"});
  v = fx.vocab_json();
  v.erase(mt::text::to_alphabet("\n"));
  expect_refused(hf_dir(v.dump(), "#version: 0.2\n"), {"vocab.json", "the byte 0x0A has no token"});
  // JSON: a key twice, nesting, not JSON at all.
  expect_refused(hf_dir("{\"a\": 1, \"a\": 2}", merges), {"vocab.json", "a"});
  expect_refused(hf_dir("[[[[[[[[[[[[]]]]]]]]]]]]", merges), {"vocab.json", "deeper"});
  expect_refused(hf_dir("{\"a\": 1", merges), {"vocab.json", "invalid JSON"});
  // Special tokens named by a config must exist.
  const std::string d = hf_dir(vocab, merges);
  write_bytes(d + "/special_tokens_map.json", R"({"eos_token": "<|im_end|>"})");
  expect_refused(d, {"special_tokens_map.json", "\"<|im_end|>\" is neither in the vocabulary"});
  write_bytes(d + "/special_tokens_map.json", R"({"eos_token": {"content": "<|endoftext|>"}})");
  write_bytes(d + "/tokenizer_config.json", R"({"add_prefix_space": true})");
  expect_refused(d, {"tokenizer_config.json", "add_prefix_space"});
  write_bytes(d + "/tokenizer_config.json", R"({"added_tokens_decoder": {"7": {"content": "<|endoftext|>"}}})");
  expect_refused(d, {"tokenizer_config.json", "<|endoftext|>", "id 7"});
}

TEST_F(TokenizerFiles, TokenizerJsonRules) {
  auto refused = [&](const std::function<void(json&)>& edit, std::initializer_list<std::string> parts) {
    json j = fx.tokenizer_json(true, false);
    edit(j);
    expect_refused(tokenizer_json(j), parts);
  };
  refused([](json& j) { j["model"]["type"] = "WordPiece"; }, {"tokenizer.json", "model.type", "\"WordPiece\""});
  refused([](json& j) { j["model"]["dropout"] = 0.1; }, {"model.dropout"});
  refused([](json& j) { j["model"]["byte_fallback"] = true; }, {"model.byte_fallback"});
  refused([](json& j) { j["model"]["unk_token"] = "<unk>"; }, {"model.unk_token"});
  refused([](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, {"model.continuing_subword_prefix"});
  refused([](json& j) { j["normalizer"] = {{"type", "NFC"}}; }, {"normalizer"});
  refused([](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; }, {"add_prefix_space"});
  refused([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+"; },
          {"pre_tokenizer.pretokenizers[0].pattern", "only GPT-2's expression"});
  refused([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; }, {"behavior"});
  refused([](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true; }, {"use_regex"});
  refused([](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, {"pre_tokenizer", "Whitespace"});
  refused([](json& j) { j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}}; }, {"add_prefix_space"});
  refused([](json& j) { j["post_processor"] = {{"type", "TemplateProcessing"}}; }, {"post_processor.single", "adds tokens"});
  // A template that adds a token before each sequence (a BOS) is refused; transformers 5's GPT-2
  // template, $A alone, adds nothing and loads.
  const json a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
  const json bos = {{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}};
  refused([&](json& j) { j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", {bos, a}}}; },
          {"post_processor.single", "adds tokens"});
  refused([](json& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; }, {"post_processor", "RobertaProcessing"});
  json gpt2_template = fx.tokenizer_json(true, false);
  gpt2_template["post_processor"] = {{"type", "TemplateProcessing"}, {"single", {a}}, {"special_tokens", json::object()}};
  const auto with_template = mt::text::Tokenizer::load(tokenizer_json(gpt2_template)).encode(" the world's");
  const auto without = mt::text::Tokenizer::load(tokenizer_json(fx.tokenizer_json(true, false))).encode(" the world's");
  EXPECT_EQ(with_template, without);
  EXPECT_GT(with_template.size(), 1u);
  refused([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, {"decoder"});
  refused([](json& j) { j["truncation"] = {{"max_length", 5}}; }, {"truncation"});
  refused([](json& j) { j["added_tokens"][0]["lstrip"] = true; }, {"added_tokens[0].lstrip"});
  refused([](json& j) { j["added_tokens"][0]["id"] = 5; }, {"<|endoftext|>", "id 5"});
  refused([](json& j) { j["model"]["merges"].push_back("x"); }, {"model.merges[36]", "\"a b\""});
  refused([](json& j) { j["model"]["merges"].push_back(json::array({"x", "q"})); }, {"model.merges[36]", "not in the vocabulary"});
  refused([](json& j) { j["model"]["merges"].push_back(7); }, {"model.merges[36]"});
  refused([](json& j) { j["model"].erase("vocab"); }, {"model.vocab", "missing"});
}

TEST_F(TokenizerFiles, OnlyRegularFilesOfBoundedSize) {
  const std::string fifo = dir.file("f.tiktoken");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_refused(fifo, {"f.tiktoken"});  // refused, never waited on
  expect_refused(dir.file("missing.json"), {"missing.json", "no such file"});
  expect_refused(dir.path(), {"neither tokenizer.json nor vocab.json"});
  const std::string big = dir.file("big.tiktoken");
  write_bytes(big, "");
  std::filesystem::resize_file(big, (uint64_t{64} << 20) + 1);
  expect_refused(big, {"big.tiktoken", "above the limit"});
  write_bytes(dir.file("x.txt"), "x");
  expect_refused(dir.file("x.txt"), {"x.txt", "not a tokenizer"});
}
