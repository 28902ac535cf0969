// FP8 quantisation on the CPU (kernels/fp8.h): a scalar loop per element over the exact
// conversions of mixtrain/float8.h, split across threads by contiguous ranges; dequantisation
// through a 256-entry table of value * scale_inv (the same product per code as a multiply per
// element, computed once).
#include <omp.h>

#include <array>
#include <bit>
#include <cmath>
#include <vector>

#include "backends/cpu/kernels/host_ptr.h"
#include "backends/cpu/kernels/loops.h"
#include "backends/cpu/kernels/register.h"
#include "kernels/fp8.h"

namespace mixtrain::kernels {
namespace {

// Per-thread partial results of the amax: max |x| over finite and infinite values, and whether a
// NaN was seen (max() would drop it). The maximum does not depend on the order, so neither does
// the result on the thread count.
struct AmaxPartial {
  float amax = 0.0f;
  bool nan = false;
  char pad[64 - sizeof(float) - sizeof(bool)];  // one cache line per thread
};

template <typename T>
struct Fp8Quantize {
  static float run(const Tensor& dst_codes, const Tensor& src, float scale, Fp8Format format) {
    const T* x = host_ptr<T>(src);
    uint8_t* q = host_ptr<uint8_t>(dst_codes);
    const int64_t n = src.numel();
    std::vector<AmaxPartial> partial(static_cast<size_t>(omp_get_max_threads()));
    // parallel_for runs the body in a region of its own or, when it stays serial (also inside an
    // enclosing region), on the calling thread: only in its own region is the thread number ours.
    const int level = omp_get_level();
    auto body = [&]<Fp8Format kFormat>(int64_t begin, int64_t end) {
      AmaxPartial& mine = partial[static_cast<size_t>(omp_get_level() > level ? omp_get_thread_num() : 0)];
      float amax = mine.amax;
      bool nan = mine.nan;
      for (int64_t i = begin; i < end; ++i) {
        const float v = static_cast<float>(x[i]);
        const uint32_t abs_bits = std::bit_cast<uint32_t>(v) & 0x7fffffffu;
        const bool finite = abs_bits < 0x7f800000u;
        nan |= abs_bits > 0x7f800000u;
        const float a = std::bit_cast<float>(abs_bits);
        amax = a > amax ? a : amax;
        q[i] = fp8_training_bits(v * scale, finite, kFormat);
      }
      mine.amax = amax;
      mine.nan = nan;
    };
    // The format as a compile-time constant inside the loop.
    if (format == Fp8Format::kE4M3)
      parallel_for(n, kGrainSize, [&](int64_t b, int64_t e) { body.template operator()<Fp8Format::kE4M3>(b, e); });
    else
      parallel_for(n, kGrainSize, [&](int64_t b, int64_t e) { body.template operator()<Fp8Format::kE5M2>(b, e); });
    float amax = 0.0f;
    for (const AmaxPartial& p : partial) {
      if (p.nan) return std::nanf("");
      amax = p.amax > amax ? p.amax : amax;
    }
    return amax;
  }
};

void fp8_dequantize_cpu(const Tensor& dst, const Tensor& src_codes, float scale_inv, Fp8Format format) {
  std::array<float, 256> table;
  for (int c = 0; c < 256; ++c) table[static_cast<size_t>(c)] = fp8_bits_to_float(static_cast<uint8_t>(c), format) * scale_inv;
  const uint8_t* q = host_ptr<uint8_t>(src_codes);
  float* y = host_ptr<float>(dst);
  parallel_for(dst.numel(), kGrainSize, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = table[q[i]];
  });
}

}  // namespace

void register_cpu_fp8(const Registry& r) {
  r.set(fp8_quantize_table, kFloat32, &Fp8Quantize<float>::run);
  r.set(fp8_quantize_table, kBFloat16, &Fp8Quantize<bfloat16>::run);
  r.set(fp8_quantize_table, kFloat16, &Fp8Quantize<float16>::run);
  r.set(fp8_dequantize_table, kFloat32, &fp8_dequantize_cpu);
}

}  // namespace mixtrain::kernels
