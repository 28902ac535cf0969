// libFuzzer harness: the byte-level text dataset on arbitrary bytes. The first byte picks the
// context (1..16), the split and the stride; the rest is the file. A batch of the first, a middle
// and the last window is read and decoded back.
#include <mixtrain/data/dataset.h>
#include <mixtrain/error.h>

#include <vector>

#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static mixtrain::fuzz::MemFile file("text");
  if (size == 0) return 0;
  const uint8_t knobs = data[0];
  const std::string& path = file.set(data + 1, size - 1);
  mixtrain::data::TextOptions o;
  o.part = static_cast<mixtrain::data::TextPart>(knobs % 3);
  o.stride = 1 + (knobs >> 6);
  o.max_bytes = 1 << 20;
  try {
    mixtrain::data::TextDataset ds(path, 1 + ((knobs >> 2) & 15), o);
    const int64_t n = ds.size();
    const std::vector<int64_t> idx = {0, n / 2, n - 1};
    const mixtrain::data::Batch b = ds.get_batch(idx);
    (void)mixtrain::data::TextDataset::decode(b.input);
  } catch (const mixtrain::Error&) {
  }
  return 0;
}
