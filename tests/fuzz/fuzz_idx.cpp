// libFuzzer harness: the IDX reader (plain and gzip) on arbitrary bytes, with a 1 MiB data limit.
#include <mixtrain/data/idx.h>
#include <mixtrain/error.h>

#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static mixtrain::fuzz::MemFile file("idx");
  const std::string& path = file.set(data, size);
  try {
    (void)mixtrain::data::read_idx(path, int64_t{1} << 20);
  } catch (const mixtrain::Error&) {
  }
  return 0;
}
