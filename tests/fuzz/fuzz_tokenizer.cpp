// libFuzzer harness: the byte-level BPE tokenizer (mixtrain/text/tokenizer.h). The first byte picks
// what the rest is: 0, a *.tiktoken file; 1, a tokenizer.json; 2, a vocab.json and a merges.txt (the
// two next bytes give vocab.json's length); 3, text encoded and decoded by a small valid tokenizer
// (built once: the 256 bytes and a few merges), which must give back its exact bytes and the same
// ids when cut at text::safe_cut. A tokenizer that loads encodes and decodes a fixed text too.
#include <mixtrain/error.h>
#include <mixtrain/text/tokenizer.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace text = mixtrain::text;

// The readers choose the format by name, so the inputs go into a scratch directory.
const std::string& scratch() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/mixtrain_fuzz_tokenizer_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) std::abort();
    return std::string(tmpl);
  }();
  return dir;
}

void put(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) std::abort();
}

std::string base64(std::string_view b) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < b.size(); i += 3) {
    uint32_t w = uint32_t(uint8_t(b[i])) << 16;
    if (i + 1 < b.size()) w |= uint32_t(uint8_t(b[i + 1])) << 8;
    if (i + 2 < b.size()) w |= uint8_t(b[i + 2]);
    out += a[(w >> 18) & 63];
    out += a[(w >> 12) & 63];
    out += i + 1 < b.size() ? a[(w >> 6) & 63] : '=';
    out += i + 2 < b.size() ? a[w & 63] : '=';
  }
  return out;
}

const text::Tokenizer& small_tokenizer() {
  static const text::Tokenizer tok = [] {
    std::string file;
    int rank = 0;
    for (int b = 0; b < 256; ++b) file += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(rank++) + "\n";
    for (const char* t : {"he", " t", " the", "in", "  ", "    ", "\n\n", "aa", "12", "123", "'s", "\xC3\xA9", "\xFF\xFE"})
      file += base64(t) + " " + std::to_string(rank++) + "\n";
    put(scratch() + "/small.tiktoken", file);
    return text::Tokenizer::load(scratch() + "/small.tiktoken");
  }();
  return tok;
}

void check_round_trip(const text::Tokenizer& tok, std::string_view s) {
  for (const auto mode : {text::Specials::kAsText, text::Specials::kRecognize}) {
    const std::vector<text::TokenId> ids = tok.encode(s, mode);
    if (tok.decode(ids) != s) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t knobs = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    switch (knobs % 4) {
      case 0:
      case 1: {
        const std::string path = scratch() + (knobs % 4 == 0 ? "/t.tiktoken" : "/tokenizer.json");
        put(path, rest);
        check_round_trip(text::Tokenizer::load(path), "Hello world's 123 \xFF\xC3\xA9  <|endoftext|>\n\n x");
        break;
      }
      case 2: {
        if (rest.size() < 2) return 0;
        const size_t n = std::min<size_t>(rest.size() - 2, uint8_t(rest[0]) | (size_t{uint8_t(rest[1])} << 8));
        const std::string dir = scratch() + "/hf";
        ::mkdir(dir.c_str(), 0700);
        put(dir + "/vocab.json", rest.substr(2, n));
        put(dir + "/merges.txt", rest.substr(2 + n));
        check_round_trip(text::Tokenizer::load(dir), "Hello world's 123 \xFF\xC3\xA9  <|endoftext|>\n\n x");
        break;
      }
      default: {
        const text::Tokenizer& tok = small_tokenizer();
        check_round_trip(tok, rest);
        (void)text::printable(rest);
        const size_t p = text::safe_cut(rest);
        if (p > 0) {
          if (p >= rest.size()) std::abort();
          std::vector<text::TokenId> joined = tok.encode(rest.substr(0, p));
          tok.encode_append(rest.substr(p), joined);
          if (joined != tok.encode(rest)) std::abort();
        }
      }
    }
  } catch (const mixtrain::Error&) {
  }
  return 0;
}
