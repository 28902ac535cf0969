// A small byte-level BPE vocabulary made by the tests: the 256 bytes (ids in a shuffled order, so
// that no code can take a byte for its id) and a few dozen merges, written in each layout the
// Tokenizer reads: vocab.json + merges.txt, tokenizer.json (both pre-tokenizer shapes, both merges
// spellings) and a .tiktoken file. A reference BPE over the same merges checks the fast one.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "data/file_helpers.h"
#include "mixtrain/text/tokenizer.h"
#include "text/byte_alphabet.h"
#include "text/pretokenizer.h"

namespace mixtrain::testing {

struct BpeFixture {
  // Token bytes by id.
  std::vector<std::string> tokens;
  // Merges in rank order, as bytes.
  std::vector<std::pair<std::string, std::string>> merges;
  uint32_t eot = 0;  // <|endoftext|>: the id after the last token

  BpeFixture() {
    tokens.resize(256);
    for (int b = 0; b < 256; ++b) tokens[(b * 7 + 3) % 256] = std::string(1, static_cast<char>(b));
    const std::vector<std::pair<std::string, std::string>> m = {
        {"h", "e"},   {" ", "t"},    {" t", "he"},   {"i", "n"},       {" ", "a"},       {"e", "r"},
        {"o", "n"},   {" ", "s"},    {"r", "e"},     {"t", "h"},       {"in", "g"},      {" ", " "},
        {"  ", "  "}, {"\n", "\n"},  {"1", "2"},     {"12", "3"},      {"o", "r"},       {" ", "w"},
        {" w", "or"}, {" wor", "l"}, {" worl", "d"}, {"'", "s"},       {"l", "l"},       {"'", "ll"},
        {"\xC3", "\xA9"}, {"\xF0", "\x9F"}, {"a", "a"}, {"\xFF", "\xFE"}, {".", "."}, {" ", "d"},
        {" d", "on"}, {"'", "t"},   {"\xE4\xBD", "\xA0"}, {"\xE4", "\xBD"}, {"\n", " "}, {"t", "er"},
    };
    for (const auto& [a, b] : m) {
      merges.emplace_back(a, b);
      tokens.push_back(a + b);
    }
    eot = static_cast<uint32_t>(tokens.size());
  }

  uint32_t id(const std::string& bytes) const {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == bytes) return static_cast<uint32_t>(i);
    if (bytes == "<|endoftext|>") return eot;
    throw std::runtime_error("fixture has no token " + bytes);
  }

  nlohmann::json vocab_json(bool with_eot = true) const {
    nlohmann::json v = nlohmann::json::object();
    for (size_t i = 0; i < tokens.size(); ++i) v[text::to_alphabet(tokens[i])] = i;
    if (with_eot) v["<|endoftext|>"] = eot;
    return v;
  }
  std::string merges_txt() const {
    std::string s = "#version: 0.2\n";
    for (const auto& [a, b] : merges) s += text::to_alphabet(a) + " " + text::to_alphabet(b) + "\n";
    return s;
  }
  // sequence: the Split + ByteLevel shape; pairs: merges as ["a", "b"].
  nlohmann::json tokenizer_json(bool sequence, bool pairs) const {
    using json = nlohmann::json;
    json merges_j = json::array();
    for (const auto& [a, b] : merges) {
      if (pairs) merges_j.push_back(json::array({text::to_alphabet(a), text::to_alphabet(b)}));
      else merges_j.push_back(text::to_alphabet(a) + " " + text::to_alphabet(b));
    }
    json pre;
    if (sequence) {
      pre = {{"type", "Sequence"},
             {"pretokenizers",
              json::array({json{{"type", "Split"},
                                {"pattern", {{"Regex", std::string(text::kGpt2Pattern)}}},
                                {"behavior", "Isolated"},
                                {"invert", false}},
                           json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                                {"use_regex", false}}})}};
    } else {
      pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
    }
    return {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", json::array({json{{"id", eot},
                                               {"content", "<|endoftext|>"},
                                               {"single_word", false},
                                               {"lstrip", false},
                                               {"rstrip", false},
                                               {"normalized", true},
                                               {"special", true}}})},
            {"normalizer", nullptr},
            {"pre_tokenizer", pre},
            {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
            {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
            {"model",
             {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", nullptr},
              {"continuing_subword_prefix", ""},
              {"end_of_word_suffix", ""},
              {"fuse_unk", false},
              {"byte_fallback", false},
              {"ignore_merges", false},
              {"vocab", vocab_json()},
              {"merges", merges_j}}}};
  }
  std::string tiktoken() const {
    std::string s;
    for (size_t i = 0; i < tokens.size(); ++i) s += base64(tokens[i]) + " " + std::to_string(i) + "\n";
    return s;
  }

  // The directory layout (vocab.json + merges.txt, no config: <|endoftext|> from the vocabulary).
  std::string write_vocab_merges(const TempDir& dir, const std::string& name = "hf") const {
    const std::string d = dir.file(name);
    std::filesystem::create_directories(d);
    write_bytes(d + "/vocab.json", vocab_json().dump());
    write_bytes(d + "/merges.txt", merges_txt());
    return d;
  }
  std::string write_tokenizer_json(const TempDir& dir, bool sequence, bool pairs) const {
    const std::string f = dir.file(std::string("tok-") + (sequence ? "seq" : "bl") + (pairs ? "-pairs" : "-strings") + ".json");
    write_bytes(f, tokenizer_json(sequence, pairs).dump());
    return f;
  }
  std::string write_tiktoken(const TempDir& dir) const {
    const std::string f = dir.file("fixture.tiktoken");
    write_bytes(f, tiktoken());
    return f;
  }

  // Reference BPE (Hugging Face's definition, written plainly): parts start as bytes; while some
  // adjacent pair is a listed merge, merge the one of lowest rank, the leftmost of equals.
  std::vector<uint32_t> reference_encode(std::string_view text) const {
    std::map<std::pair<std::string, std::string>, size_t> rank;
    for (size_t i = 0; i < merges.size(); ++i) rank[merges[i]] = i;
    std::vector<uint32_t> out;
    text::PreTokenizer pre;
    pre.split(text, [&](std::string_view piece) {
      std::vector<std::string> parts;
      for (char c : piece) parts.emplace_back(1, c);
      while (parts.size() > 1) {
        size_t best = SIZE_MAX, at = 0;
        for (size_t i = 0; i + 1 < parts.size(); ++i) {
          auto it = rank.find({parts[i], parts[i + 1]});
          if (it != rank.end() && it->second < best) {
            best = it->second;
            at = i;
          }
        }
        if (best == SIZE_MAX) break;
        parts[at] += parts[at + 1];
        parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
      }
      for (const auto& p : parts) out.push_back(id(p));
    });
    return out;
  }

  static std::string base64(const std::string& bytes) {
    static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    size_t i = 0;
    for (; i + 3 <= bytes.size(); i += 3) {
      const uint32_t w = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint8_t(bytes[i + 2]);
      for (int k = 3; k >= 0; --k) out += a[(w >> (6 * k)) & 63];
    }
    if (bytes.size() - i == 1) {
      const uint32_t w = uint32_t(uint8_t(bytes[i])) << 16;
      out += a[(w >> 18) & 63];
      out += a[(w >> 12) & 63];
      out += "==";
    } else if (bytes.size() - i == 2) {
      const uint32_t w = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8);
      out += a[(w >> 18) & 63];
      out += a[(w >> 12) & 63];
      out += a[(w >> 6) & 63];
      out += '=';
    }
    return out;
  }
};

}  // namespace mixtrain::testing
