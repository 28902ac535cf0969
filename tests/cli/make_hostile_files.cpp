// Writes the hostile inputs of the CLI tests into the directory given as argv[1]:
//   forged.safetensors   tensor names and metadata with newlines, terminal escape sequences, a NUL
//                        and a byte that is not UTF-8-printable; `mixtrain inspect` must print them
//                        escaped, one line each
//   fifo                 a FIFO (no writer): readers must refuse it at once instead of blocking
//   tokens-train.bin, tokens-val.bin   llm.c token files of tokens below 64 (the tiny GPT-2 fixture's
//                        vocabulary), 2049 and 257 tokens
//   tokens-big.bin       the same with a token (100) outside that vocabulary
//   tiny.tiktoken        a byte-level BPE vocabulary: the 256 bytes and 24 merges of English text
//                        (ranks 0..279; <|endoftext|> is then 280), for a GPT-2 of vocabulary 300
//   tiny-gpt2-300.json   that GPT-2's config.json (64 positions, C 32, 2 layers, 4 heads)
//   bad.tiktoken         the same vocabulary with a line that is not base64 (line 3)
#include <mixtrain/data/token_file.h>
#include <mixtrain/mixtrain.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace {

std::string base64(const std::string& bytes) {
  static const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 2]);
    out += table[(v >> 18) & 63];
    out += table[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? table[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? table[v & 63] : '=';
  }
  return out;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// "base64(bytes) rank" per token: the 256 bytes, then merges whose parts are tokens already.
void write_tiny_tiktoken(const std::string& dir) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (const char* t : {"th", "he", " t", "the", " the", "in", "er", "an", " a", "re", "on", "at", "en", "ro",
                        "ow", "ox", " f", " fox", " d", "do", " do", " dog", "qu", " qu"})
    tokens.emplace_back(t);
  std::string good, bad;
  for (size_t r = 0; r < tokens.size(); ++r) {
    const std::string line = base64(tokens[r]) + " " + std::to_string(r) + "\n";
    good += line;
    bad += r == 2 ? "not*base64 2\n" : line;
  }
  write_text(dir + "/tiny.tiktoken", good);
  write_text(dir + "/bad.tiktoken", bad);
  write_text(dir + "/tiny-gpt2-300.json",
             R"({"model_type": "gpt2", "vocab_size": 300, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 4})");
}

}  // namespace

int main(int argc, char** argv) {
  namespace mt = mixtrain;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const std::string forged = "x\nmodel.0.weight  float32  [1]  4 B\n\x1b[2J\x1b[31mred";
  mt::io::save_safetensors(dir + "/forged.safetensors",
                           mt::io::NamedTensors{{forged, mt::zeros({1})}, {std::string("nul\0byte", 8), mt::zeros({1})}},
                           {{"note\nforged = yes", "value\x1b]0;title\x07"}});
  auto tokens = [](int n, uint16_t bad_at_7) {
    std::vector<uint16_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) t[i] = static_cast<uint16_t>((i * 7 + i / 5) % 64);
    if (bad_at_7 != 0) t[7] = bad_at_7;
    return t;
  };
  mt::data::TokenFileDataset::write(dir + "/tokens-train.bin", tokens(2049, 0));
  mt::data::TokenFileDataset::write(dir + "/tokens-val.bin", tokens(257, 0));
  mt::data::TokenFileDataset::write(dir + "/tokens-big.bin", tokens(257, 100));
  write_tiny_tiktoken(dir);
  ::unlink((dir + "/fifo").c_str());
  if (::mkfifo((dir + "/fifo").c_str(), 0600) != 0) {
    std::perror("mkfifo");
    return 1;
  }
  return 0;
}
