// src/core/cpu.cpp: CPU feature detection and the one ISA cap (mixtrain/cpu.h).
#include "mixtrain/cpu.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "mixtrain/error.h"

#include "core/isa_target.h"
#if MT_X86_TARGETS
#include <cpuid.h>
#endif

namespace mixtrain::cpu {
namespace {

constexpr const char* kEnvVar = "MIXTRAIN_MAX_ISA";

#if MT_X86_TARGETS
uint64_t read_xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// cpuid reports what the core implements; XCR0 says which register state the OS saves on a
// context switch. An instruction set is usable only with both (a hypervisor may hide ZMM state).
Features detect() {
  Features f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) != 0) {
    // The vendor string is ebx, edx, ecx: "Auth" "enti" "cAMD".
    char vendor[12];
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    f.amd = std::memcmp(vendor, "AuthenticAMD", 12) == 0;
  }
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return f;
  const bool osxsave = (c >> 27) & 1u;
  if (!osxsave) return f;
  const uint64_t xcr0 = read_xcr0();
  const bool ymm_state = (xcr0 & 0x06u) == 0x06u;         // SSE + AVX
  const bool zmm_state = (xcr0 & 0xe6u) == 0xe6u;         // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool tile_state = (xcr0 & 0x60000u) == 0x60000u;  // XTILECFG + XTILEDATA
  const bool avx = ymm_state && ((c >> 28) & 1u);
  f.fma = avx && ((c >> 12) & 1u);
  f.f16c = avx && ((c >> 29) & 1u);
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned max_subleaf = a;
  f.avx2 = avx && ((b >> 5) & 1u);
  const bool avx512f = zmm_state && ((b >> 16) & 1u);
  const bool avx512dq = (b >> 17) & 1u;
  const bool avx512bw = (b >> 30) & 1u;
  const bool avx512vl = (b >> 31) & 1u;
  f.avx512 = avx512f && avx512dq && avx512bw && avx512vl;
  f.avx512_fp16 = f.avx512 && ((d >> 23) & 1u);
  const bool amx_bf16 = (d >> 22) & 1u;
  const bool amx_tile = (d >> 24) & 1u;
  f.amx = tile_state && amx_tile && amx_bf16;
  if (max_subleaf >= 1) {
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512_bf16 = f.avx512 && ((a >> 5) & 1u);
  }
  return f;
}

std::string detect_name() {
  if (static_cast<unsigned>(__get_cpuid_max(0x80000000u, nullptr)) < 0x80000004u) return {};
  char brand[49] = {};
  for (unsigned leaf = 0; leaf < 3; ++leaf) {
    unsigned r[4] = {};
    __cpuid(0x80000002u + leaf, r[0], r[1], r[2], r[3]);
    std::memcpy(brand + 16 * leaf, r, 16);
  }
  std::string s(brand);
  // Brand strings are padded with spaces on either side.
  const size_t first = s.find_first_not_of(' ');
  if (first == std::string::npos) return {};
  s = s.substr(first, s.find_last_not_of(' ') - first + 1);
  // Keep only printable ASCII: the string ends up in reports and JSON.
  std::replace_if(
      s.begin(), s.end(), [](char ch) { return ch < 0x20 || ch > 0x7e; }, '?');
  return s;
}
#else
Features detect() { return {}; }
std::string detect_name() { return {}; }
#endif

Isa level_of(const Features& f) {
  if (!(f.avx2 && f.fma && f.f16c)) return Isa::kGeneric;
  if (!f.avx512) return Isa::kAvx2;
  if (!f.avx512_bf16) return Isa::kAvx512;
  if (!f.amx) return Isa::kAvx512Bf16;
  return Isa::kAmx;
}

// The cap's state. Read from the environment once, under the mutex; afterwards a relaxed atomic
// load serves every dispatch. An invalid value is kept as an error message and thrown by every
// query (until set_max_isa() replaces it), so it cannot be overlooked.
constexpr int kUnread = -1;
constexpr int kInvalid = -2;
std::atomic<int> g_cap{kUnread};
enum class CapSource : int { kNone, kEnvironment, kApi };
std::atomic<CapSource> g_cap_source{CapSource::kNone};
std::mutex g_env_mutex;
std::string g_env_error;  // written once under g_env_mutex, before g_cap becomes kInvalid

int read_env_cap() {
  std::lock_guard<std::mutex> lock(g_env_mutex);
  int cap = g_cap.load();
  if (cap != kUnread) return cap;
  const char* env = std::getenv(kEnvVar);
  try {
    const std::optional<Isa> parsed = env ? parse_isa(env, kEnvVar) : std::nullopt;
    g_cap_source.store(parsed ? CapSource::kEnvironment : CapSource::kNone);
    cap = static_cast<int>(parsed.value_or(Isa::kAmx));
  } catch (const Error& e) {
    g_env_error = e.what();
    cap = kInvalid;
  }
  g_cap.store(cap);
  return cap;
}

int cap_state() {
  const int cap = g_cap.load(std::memory_order_acquire);
  return cap == kUnread ? read_env_cap() : cap;
}

}  // namespace

std::string_view to_string(Isa isa) {
  switch (isa) {
    case Isa::kGeneric: return "generic";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Bf16: return "avx512_bf16";
    case Isa::kAmx: return "amx";
  }
  return "?";
}

std::optional<Isa> parse_isa(std::string_view text, std::string_view source) {
  if (text == "native") return std::nullopt;
  for (Isa isa : kAllIsas)
    if (text == to_string(isa)) return isa;
  MT_FAIL(source, "=", detail::quote_untrusted(text),
          " is not an instruction-set level; accepted values: generic, avx2, avx512, avx512_bf16, amx, native"
          " (native: no cap)");
}

const Features& features() {
  static const Features f = detect();
  return f;
}

const std::string& cpu_name() {
  static const std::string n = [] {
    std::string s = detect_name();
    return s.empty() ? std::string("unknown x86-64 CPU") : s;
  }();
  return n;
}

Isa detected_isa() {
  static const Isa level = level_of(features());
  return level;
}

Isa max_isa() {
  const int cap = cap_state();
  if (cap == kInvalid) throw Error(g_env_error);
  return static_cast<Isa>(cap);
}

bool max_isa_is_set() {
  cap_state();
  return g_cap_source.load() != CapSource::kNone;
}

Isa isa() {
  const int cap = cap_state();
  if (cap == kInvalid) [[unlikely]] {
    // Throwing out of an OpenMP region would terminate the process; the calling thread has thrown
    // this error already (every kernel asks before it goes parallel), so the safe choice suffices.
    if (omp_in_parallel()) return Isa::kGeneric;
    throw Error(g_env_error);
  }
  return std::min(detected_isa(), static_cast<Isa>(cap));
}

Isa set_max_isa(Isa cap) {
  const int previous = cap_state();
  std::lock_guard<std::mutex> lock(g_env_mutex);
  g_cap_source.store(CapSource::kApi);
  g_cap.store(static_cast<int>(cap), std::memory_order_release);
  return previous >= 0 ? static_cast<Isa>(previous) : Isa::kAmx;
}

std::string describe() {
  std::string s = detail::concat(cpu_name(), ": ", to_string(isa()), " (detected ", to_string(detected_isa()));
  if (max_isa() < detected_isa()) {
    s += ", capped by ";
    s += g_cap_source.load() == CapSource::kEnvironment ? detail::concat(kEnvVar, "=", to_string(max_isa()))
                                                        : detail::concat("set_max_isa(", to_string(max_isa()), ")");
  }
  return s + ")";
}

}  // namespace mixtrain::cpu
