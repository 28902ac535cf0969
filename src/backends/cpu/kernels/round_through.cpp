// CPU round_through (kernels/copy.h): fp32 rounded to bf16 or fp16 and kept in fp32, the values of
// the two conversions of half.h in one pass. With AVX-512 or AVX2 each vector is rounded in
// registers (bf16: the integer rounding of core/half_convert_avx*.h; fp16: vcvtps2ph with its
// rounding immediate, then vcvtph2ps), reading and writing 8 bytes per element and nothing more;
// on baseline x86-64 the row converters run on L1-sized pieces. Every path gives the bits of the
// scalar conversions (tests/amp/test_autocast_route.cpp runs each level).
#include "core/isa_target.h"
#include <algorithm>
#include <cstring>

#include "core/half_convert_avx2.h"
#include "core/half_convert_avx512.h"
#include "kernels/copy.h"
#include "backends/cpu/kernels/host_ptr.h"
#include "backends/cpu/kernels/loops.h"
#include "backends/cpu/kernels/register.h"
#include "mixtrain/cpu.h"

// GCC 12 flags its own AVX-512 conversion intrinsics with -Wmaybe-uninitialized (GCC bug 105593,
// as in core/half_convert_x86.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace mixtrain::kernels {
namespace {

// Baseline: through a 16-bit buffer that stays in L1.
template <typename T, void (*Narrow)(const float*, T*, int64_t), void (*Widen)(const T*, float*, int64_t)>
void round_pieces(const float* in, float* out, int64_t n) {
  constexpr int64_t kPiece = 2048;
  T buf[kPiece];
  for (int64_t i = 0; i < n; i += kPiece) {
    const int64_t len = std::min(kPiece, n - i);
    Narrow(in + i, buf, len);
    Widen(buf, out + i, len);
  }
}

#if MT_X86_TARGETS
using namespace detail::x86;

MT_TARGET_AVX512 inline __m512 fp16_round_through16(__m512 x) {
  return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// 16 lanes at a time, the tail under a mask.
template <__m512 (*Round)(__m512)>
MT_TARGET_AVX512 void round_avx512(const float* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, Round(_mm512_loadu_ps(in + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, m, Round(_mm512_maskz_loadu_ps(m, in + i)));
  }
}


MT_TARGET_AVX2_NO_FMA inline __m256 fp16_round_through8(__m256 x) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// 8 lanes at a time, the tail through a zero-padded vector.
template <__m256 (*Round)(__m256)>
MT_TARGET_AVX2_NO_FMA void round_avx2(const float* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, Round(_mm256_loadu_ps(in + i)));
  if (i < n) {
    alignas(32) float tail[8] = {};
    std::memcpy(tail, in + i, (n - i) * sizeof(float));
    _mm256_store_ps(tail, Round(_mm256_load_ps(tail)));
    std::memcpy(out + i, tail, (n - i) * sizeof(float));
  }
}
#endif

using RoundFn = void (*)(const float*, float*, int64_t);

// The widest path cpu::isa() allows for precision T.
template <typename T>
RoundFn round_fn() {
#if MT_X86_TARGETS
  const cpu::Isa isa = cpu::isa();
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (isa >= cpu::Isa::kAvx512) return &round_avx512<bf16_round_through16>;
    if (isa >= cpu::Isa::kAvx2) return &round_avx2<bf16_round_through8>;
  } else {
    if (isa >= cpu::Isa::kAvx512) return &round_avx512<fp16_round_through16>;
    if (isa >= cpu::Isa::kAvx2) return &round_avx2<fp16_round_through8>;
  }
#endif
  if constexpr (std::is_same_v<T, bfloat16>) {
    return &round_pieces<bfloat16, convert_fp32_to_bf16, convert_bf16_to_fp32>;
  } else {
    return &round_pieces<float16, convert_fp32_to_fp16, convert_fp16_to_fp32>;
  }
}

template <typename T>
void round_through_cpu(const Tensor& dst, const Tensor& src) {
  const RoundFn fn = round_fn<T>();  // chosen on the calling thread (cpu::isa() may throw here, not in a worker)
  const float* in = host_ptr<float>(src);
  float* out = host_ptr<float>(dst);
  parallel_for(dst.numel(), kGrainSize, [&](int64_t begin, int64_t end) { fn(in + begin, out + begin, end - begin); });
}

}  // namespace

void register_cpu_round_through(const Registry& r) {
  r.set(round_through_table, kBFloat16, &round_through_cpu<bfloat16>);
  r.set(round_through_table, kFloat16, &round_through_cpu<float16>);
}

}  // namespace mixtrain::kernels
