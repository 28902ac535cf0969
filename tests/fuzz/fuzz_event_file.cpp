// libFuzzer harness: the TensorBoard event file reader (mixtrain/io/event_file.h) on arbitrary bytes:
// TFRecord framing, CRCs, length limits, and protobuf's parsing of what passes them. Any outcome but
// a result or an mt::Error (a crash, a sanitizer report, a hang, a huge allocation) is a finding.
// CRCs make random mutations stop at the framing; the seeds (corpus/event_file) are whole files,
// and libFuzzer's comparison tracing finds CRC values it can copy.
#include <mixtrain/error.h>
#include <mixtrain/io/event_file.h>

#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static mixtrain::fuzz::MemFile file("event_file");
  const std::string& path = file.set(data, size);
  try {
    const mixtrain::io::EventFileContents c = mixtrain::io::read_event_file(path);
    // Every scalar read comes from a record, and a record holds at least a tag byte per scalar.
    if (c.scalars.size() > size) __builtin_trap();
  } catch (const mixtrain::Error&) {
  }
  return 0;
}
