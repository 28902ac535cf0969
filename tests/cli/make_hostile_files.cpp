// Writes the hostile inputs of the CLI tests into the directory given as argv[1]:
//   forged.safetensors   tensor names and metadata with newlines, terminal escape sequences, a NUL
//                        and a byte that is not UTF-8-printable; `mixtrain inspect` must print them
//                        escaped, one line each
//   fifo                 a FIFO (no writer): readers must refuse it at once instead of blocking
//   tokens-train.bin, tokens-val.bin   llm.c token files of tokens below 64 (the tiny GPT-2 fixture's
//                        vocabulary), 2049 and 257 tokens
//   tokens-big.bin       the same with a token (100) outside that vocabulary
#include <mixtrain/data/token_file.h>
#include <mixtrain/mixtrain.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

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
  ::unlink((dir + "/fifo").c_str());
  if (::mkfifo((dir + "/fifo").c_str(), 0600) != 0) {
    std::perror("mkfifo");
    return 1;
  }
  return 0;
}
