// CPU copy and fill. Contiguous fp32 <-> 16-bit conversions go through the SIMD row converters of
// half.h; everything else through cpu_kernel's strided loop.
#include <cstring>

#include "kernels/copy.h"
#include "backends/cpu/kernels/host_ptr.h"
#include "backends/cpu/kernels/loops.h"
#include "backends/cpu/kernels/register.h"

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
  if (s == kFloat32 && d == kFloat16) return run(convert_fp32_to_fp16, host_ptr<float>(src), host_ptr<float16>(dst));
  if (s == kFloat16 && d == kFloat32) return run(convert_fp16_to_fp32, host_ptr<float16>(src), host_ptr<float>(dst));
  if (s == kFloat32 && d == kBFloat16) return run(convert_fp32_to_bf16, host_ptr<float>(src), host_ptr<bfloat16>(dst));
  if (s == kBFloat16 && d == kFloat32) return run(convert_bf16_to_fp32, host_ptr<bfloat16>(src), host_ptr<float>(dst));
  if (s == d) {
    const char* in = static_cast<const char*>(host_data(src));
    char* out = static_cast<char*>(host_data(dst));
    const int64_t es = static_cast<int64_t>(dst.element_size());
    parallel_for(n, kGrainSize * 4, [&](int64_t b, int64_t e) { std::memcpy(out + b * es, in + b * es, (e - b) * es); });
    return true;
  }
  return false;
}

void copy_cpu(const Tensor& dst, const Tensor& src) {
  if (try_bulk_convert(dst, src)) return;
  dispatch_all(dst.dtype(), [&]<typename Out>() {
    dispatch_all(src.dtype(), [&]<typename In>() {
      // Convert directly (no compute type): the identity functor on the source type.
      cpu_kernel<In, Out, In>(dst, [](In v) { return v; }, src);
    });
  });
}

void fill_cpu(const Tensor& dst, double value) {
  dispatch_all(dst.dtype(), [&]<typename T>() {
    const T v = convert<T>(value);
    cpu_kernel<T, T>(dst, [v]() { return v; });
  });
}

}  // namespace

void register_cpu_copy(const Registry& r) {
  r.every_dtype(copy_table, &copy_cpu);
  r.every_dtype(fill_table, &fill_cpu);
}

}  // namespace mixtrain::kernels
