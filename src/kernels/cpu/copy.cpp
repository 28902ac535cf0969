// CPU copy and fill. Contiguous fp32 <-> 16-bit conversions go through the SIMD row converters of
// half.h; everything else through cpu_kernel's strided loop.
#include "kernels/copy.h"

#include <cstring>

#include "kernels/cpu/loops.h"

namespace mixtrain::kernels {
namespace {

// Contiguous conversions with a vectorised row converter; returns false when none applies.
bool try_bulk_convert(const Tensor& dst, const Tensor& src) {
  if (!dst.is_contiguous() || !src.is_contiguous()) return false;
  const int64_t n = dst.numel();
  DType d = dst.dtype(), s = src.dtype();
  auto run = [&](auto fn, auto* in, auto* out) {
    parallel_for(n, kGrainSize, [&](int64_t b, int64_t e) { fn(in + b, out + b, e - b); });
    return true;
  };
  if (s == kFloat32 && d == kFloat16) return run(convert_fp32_to_fp16, src.data_ptr<float>(), dst.data_ptr<float16>());
  if (s == kFloat16 && d == kFloat32) return run(convert_fp16_to_fp32, src.data_ptr<float16>(), dst.data_ptr<float>());
  if (s == kFloat32 && d == kBFloat16) return run(convert_fp32_to_bf16, src.data_ptr<float>(), dst.data_ptr<bfloat16>());
  if (s == kBFloat16 && d == kFloat32) return run(convert_bf16_to_fp32, src.data_ptr<bfloat16>(), dst.data_ptr<float>());
  if (s == d) {
    const char* in = static_cast<const char*>(src.raw_data());
    char* out = static_cast<char*>(dst.raw_data());
    const int64_t es = static_cast<int64_t>(dst.element_size());
    parallel_for(n, kGrainSize * 4, [&](int64_t b, int64_t e) { std::memcpy(out + b * es, in + b * es, (e - b) * es); });
    return true;
  }
  return false;
}

}  // namespace

void copy(const Tensor& dst, const Tensor& src) {
  MT_CHECK(dst.shape() == src.shape(), "copy: shape mismatch, destination ", describe(dst), ", source ", describe(src));
  MT_CHECK(dst.device() == src.device(), "copy: device mismatch, destination on ", dst.device(), ", source on ", src.device());
  if (dst.numel() == 0 || try_bulk_convert(dst, src)) return;
  dispatch_all(dst.dtype(), [&]<typename Out>() {
    dispatch_all(src.dtype(), [&]<typename In>() {
      // Convert directly (no compute type): the identity functor on the source type.
      cpu_kernel<In, Out, In>(dst, [](In v) { return v; }, src);
    });
  });
}

void fill(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  dispatch_all(dst.dtype(), [&]<typename T>() {
    const T v = convert<T>(value);
    cpu_kernel<T, T>(dst, [v]() { return v; });
  });
}

}  // namespace mixtrain::kernels
