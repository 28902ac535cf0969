// libFuzzer harness: the GPT-2 inputs read from files, on arbitrary bytes. The first byte picks the
// reader: even, an llm.c token file (context 1..64 and a vocabulary of 256 << (bits 6..7) from the
// byte) of which the first, a middle and the last window are read; odd, a Hugging Face config.json.
#include <mixtrain/data/token_file.h>
#include <mixtrain/error.h>
#include <mixtrain/io/hf_gpt2.h>

#include <string_view>
#include <vector>

#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static mixtrain::fuzz::MemFile file("tokens");
  if (size == 0) return 0;
  const uint8_t knobs = data[0];
  try {
    if (knobs % 2 == 0) {
      const std::string& path = file.set(data + 1, size - 1);
      mixtrain::data::TokenFileDataset ds(path, 1 + ((knobs >> 1) & 31), int64_t{256} << (knobs >> 6),
                                          {.max_tokens = 1 << 20});
      const int64_t n = ds.size();
      const std::vector<int64_t> idx = {0, n / 2, n - 1};
      (void)ds.get_batch(idx);
    } else {
      const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
      const mixtrain::nn::GPT2Config c = mixtrain::io::parse_gpt2_config(text, "config.json");
      (void)mixtrain::io::gpt2_config_json(c);
    }
  } catch (const mixtrain::Error&) {
  }
  return 0;
}
