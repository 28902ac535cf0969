// libFuzzer harness: the safetensors reader (header only, and the whole file) on arbitrary bytes.
// Any outcome but a result or an mt::Error (a crash, a sanitizer report, a hang, a huge allocation)
// is a finding.
#include <mixtrain/error.h>
#include <mixtrain/io/safetensors.h>

#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static mixtrain::fuzz::MemFile file("safetensors");
  const std::string& path = file.set(data, size);
  try {
    (void)mixtrain::io::read_safetensors_header(path);
  } catch (const mixtrain::Error&) {
  }
  try {
    (void)mixtrain::io::load_safetensors(path);
  } catch (const mixtrain::Error&) {
  }
  return 0;
}
