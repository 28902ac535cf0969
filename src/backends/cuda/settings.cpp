// mixtrain/cuda.h: availability questions answered through the backend registry, and the TF32
// switch (read here, in the core, by the CUDA matmul kernels), built with or without CUDA.
#include <atomic>
#include <cstdlib>

#include "mixtrain/cuda.h"
#include "mixtrain/device.h"
#include "mixtrain/error.h"

namespace mixtrain::cuda {

bool is_available() { return device_count() > 0; }
int device_count() { return mixtrain::device_count(kCUDA); }
std::string unavailable_reason() { return device_unavailable_reason(kCUDA); }

namespace {
std::atomic<int> tf32_setting{-1};  // -1: not yet read from the environment
}

void set_allow_tf32(bool allow) { tf32_setting.store(allow ? 1 : 0); }

bool allow_tf32() {
  int v = tf32_setting.load();
  if (v >= 0) return v == 1;
  const char* env = std::getenv("MIXTRAIN_ALLOW_TF32");
  const std::string s = env != nullptr ? env : "";
  MT_CHECK(s.empty() || s == "0" || s == "1", "MIXTRAIN_ALLOW_TF32 must be 0 or 1, got \"",
           detail::escape_untrusted(s.substr(0, 64)), "\"");
  int expected = -1;
  tf32_setting.compare_exchange_strong(expected, s == "1" ? 1 : 0);
  return tf32_setting.load() == 1;
}

}  // namespace mixtrain::cuda
