// mixtrain/cpu.h: which x86-64 instruction sets mixtrain's CPU kernels use, and the one cap on them.
//
// mixtrain is built for baseline x86-64 and picks its vector kernels at run time. Every such choice
// (16-bit conversions, elementwise loops, softmax / layer-norm rows, pooling, attention products,
// the optimizer step, the bf16 GEMM path) asks one function, cpu::isa(): the best level that the
// CPU and OS support, lowered to the cap. The cap comes from the environment variable
// MIXTRAIN_MAX_ISA (read once, on first use) or from set_max_isa(). Capping is how a machine with
// AVX-512 runs the code that an AVX2-only laptop runs, and how the tests cover every path.
//
// oneDNN, which runs the matrix products and convolutions, has a cap of its own. When
// MIXTRAIN_MAX_ISA is set (or set_max_isa() is called before the first matrix product), mixtrain
// sets oneDNN's cap to the matching level before oneDNN's first use, overriding DNNL_MAX_CPU_ISA:
//   generic -> sse41 (oneDNN's lowest JIT level), avx2 -> avx2, avx512 -> avx512_core,
//   avx512_bf16 -> avx512_core_bf16, amx -> no cap.
// oneDNN reads its cap once per process, so set_max_isa() after the first matrix product changes
// mixtrain's own kernels and its choice of bf16 path, not oneDNN's kernels.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mixtrain::cpu {

// Instruction-set levels, each one including everything below it.
enum class Isa : uint8_t {
  kGeneric,     // baseline x86-64 (SSE2): plain loops that the compiler vectorises for SSE2
  kAvx2,        // + AVX2, FMA and F16C (Intel Haswell and later, AMD Zen 1-3)
  kAvx512,      // + AVX-512 F, BW, VL and DQ (Intel Skylake-SP and later; AMD Zen 4 and later)
  kAvx512Bf16,  // + AVX512_BF16 dot products and conversions (Intel Cooper Lake, Sapphire Rapids; Zen 4)
  kAmx,         // + AMX-TILE and AMX-BF16 tile matrix units (Intel Sapphire Rapids and later)
};
inline constexpr Isa kAllIsas[] = {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16, Isa::kAmx};

// "generic", "avx2", "avx512", "avx512_bf16", "amx": the names MIXTRAIN_MAX_ISA accepts.
std::string_view to_string(Isa isa);
// Parses one of those names, or "native" (no cap, returned as nullopt). Anything else throws
// mt::Error naming `source` (e.g. "MIXTRAIN_MAX_ISA") and the accepted values.
std::optional<Isa> parse_isa(std::string_view text, std::string_view source);

// What the CPU reports (cpuid, and the OS's saved register state from xgetbv).
struct Features {
  bool f16c = false;
  bool fma = false;
  bool avx2 = false;
  bool avx512 = false;  // F, BW, VL and DQ together
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;  // not used by mixtrain's kernels or by oneDNN 2.6's GEMMs; reported only
  bool amx = false;          // AMX-TILE and AMX-BF16, with the tile state enabled by the OS
  // The vendor string of cpuid leaf 0 is "AuthenticAMD". The one use: AMD's AVX512-BF16 cores (Zen 4
  // and later) retire a bf16 dot product at the rate of an fp32 FMA, Intel's at half of it, which
  // decides the bf16 GEMM path (kernels::bf16_path).
  bool amd = false;
};
const Features& features();
// The processor's brand string ("AMD EPYC 7B13", ...), or "unknown x86-64 CPU".
const std::string& cpu_name();

// The best level the CPU and OS support (ignores the cap).
Isa detected_isa();
// The cap: MIXTRAIN_MAX_ISA, or the last set_max_isa(); kAmx when neither says otherwise.
// Throws mt::Error when MIXTRAIN_MAX_ISA holds an invalid value.
Isa max_isa();
// True when the cap came from MIXTRAIN_MAX_ISA or set_max_isa() (not the kAmx default).
bool max_isa_is_set();
// The level every run-time choice uses: min(detected_isa(), max_isa()). Throws like max_isa()
// (except inside an OpenMP parallel region, where it returns kGeneric rather than throw: the error
// has already been thrown on the calling thread before any kernel could go parallel).
Isa isa();
// Sets the cap (replacing MIXTRAIN_MAX_ISA's) and returns the previous one. Meant for tests and
// benchmarks; not to be called while other threads run kernels.
Isa set_max_isa(Isa cap);

// One line for logs and reports: "AMD EPYC 7B13: avx2 (detected avx2)" or
// "... : avx2 (detected avx512_bf16, capped by MIXTRAIN_MAX_ISA=avx2)".
std::string describe();

// Lowers the cap for a scope and restores it afterwards.
class MaxIsaGuard {
 public:
  explicit MaxIsaGuard(Isa cap) : previous_(set_max_isa(cap)) {}
  ~MaxIsaGuard() { set_max_isa(previous_); }
  MaxIsaGuard(const MaxIsaGuard&) = delete;
  MaxIsaGuard& operator=(const MaxIsaGuard&) = delete;

 private:
  Isa previous_;
};

}  // namespace mixtrain::cpu
