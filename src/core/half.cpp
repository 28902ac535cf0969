// src/core/half.cpp: printing of float16/bfloat16, and the bulk row converters with their run-time
// choice of implementation under the ISA cap of mixtrain/cpu.h (Note [Half conversions] in
// docs/notes/conversions.md).
#include "mixtrain/half.h"

#include <ostream>

#include "core/half_convert.h"
#include "core/prefetch.h"
#include "mixtrain/cpu.h"
#include "mixtrain/error.h"

namespace mixtrain {

std::ostream& operator<<(std::ostream& os, float16 h) { return os << static_cast<float>(h); }
std::ostream& operator<<(std::ostream& os, bfloat16 h) { return os << static_cast<float>(h); }

namespace detail {

namespace {

using Fp32ToFp16Fn = void (*)(const float*, float16*, int64_t);
using Fp16ToFp32Fn = void (*)(const float16*, float*, int64_t);
using Fp32ToBf16Fn = void (*)(const float*, bfloat16*, int64_t);
using Bf16ToFp32Fn = void (*)(const bfloat16*, float*, int64_t);

void fp32_to_fp16_scalar(const float* src, float16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float16(src[i]);
}
void fp16_to_fp32_scalar(const float16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}
void fp32_to_bf16_scalar(const float* src, bfloat16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bfloat16(src[i]);
}
void bf16_to_fp32_scalar(const bfloat16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

// One implementation's kernels; nullptr where it has none for a conversion.
struct Kernels {
  Fp32ToFp16Fn fp32_to_fp16 = nullptr;
  Fp16ToFp32Fn fp16_to_fp32 = nullptr;
  Fp32ToBf16Fn fp32_to_bf16 = nullptr;
  Bf16ToFp32Fn bf16_to_fp32 = nullptr;
};

Kernels kernels_of(HalfImpl impl) {
  switch (impl) {
    case HalfImpl::kScalar: return {fp32_to_fp16_scalar, fp16_to_fp32_scalar, fp32_to_bf16_scalar, bf16_to_fp32_scalar};
#if MT_X86_TARGETS
    case HalfImpl::kF16C: return {x86::fp32_to_fp16_f16c, x86::fp16_to_fp32_f16c, nullptr, nullptr};
    case HalfImpl::kAvx2: return {nullptr, nullptr, x86::fp32_to_bf16_avx2, x86::bf16_to_fp32_avx2};
    case HalfImpl::kAvx512:
      return {x86::fp32_to_fp16_avx512, x86::fp16_to_fp32_avx512, x86::fp32_to_bf16_avx512, x86::bf16_to_fp32_avx512};
    case HalfImpl::kAvx512Bf16: return {nullptr, nullptr, x86::fp32_to_bf16_avx512bf16, nullptr};
#else
    default: return {};
#endif
  }
  return {};
}

bool has_kernel(const Kernels& k, HalfConversion conv) {
  switch (conv) {
    case HalfConversion::kFp32ToFp16: return k.fp32_to_fp16 != nullptr;
    case HalfConversion::kFp16ToFp32: return k.fp16_to_fp32 != nullptr;
    case HalfConversion::kFp32ToBf16: return k.fp32_to_bf16 != nullptr;
    case HalfConversion::kBf16ToFp32: return k.bf16_to_fp32 != nullptr;
  }
  return false;
}

// The lowest ISA level (mixtrain/cpu.h) at which an implementation may run. The F16C converters
// need only AVX + F16C, but every level from kAvx2 up has them, and one level scale keeps the cap
// simple (a CPU with F16C but no AVX2 converts fp16 with the scalar code).
cpu::Isa required_level(HalfImpl impl) {
  switch (impl) {
    case HalfImpl::kScalar: return cpu::Isa::kGeneric;
    case HalfImpl::kF16C:
    case HalfImpl::kAvx2: return cpu::Isa::kAvx2;
    case HalfImpl::kAvx512: return cpu::Isa::kAvx512;
    case HalfImpl::kAvx512Bf16: return cpu::Isa::kAvx512Bf16;
  }
  return cpu::Isa::kAmx;
}

bool runs_at(HalfImpl impl, cpu::Isa level) {
  return impl == HalfImpl::kScalar || (MT_X86_TARGETS && required_level(impl) <= level);
}

// The kernels the public converters call at one ISA level.
struct Dispatch {
  HalfImpl impl[4] = {};
  Kernels k;
};

HalfImpl best_impl(HalfConversion conv, cpu::Isa level) {
  HalfImpl best = HalfImpl::kScalar;
  for (HalfImpl impl : kAllHalfImpls) {
    if (runs_at(impl, level) && implements(impl, conv)) best = impl;  // kAllHalfImpls is in preference order
  }
  return best;
}

Dispatch make_dispatch(cpu::Isa level) {
  Dispatch d;
  for (HalfConversion conv : kAllHalfConversions) d.impl[static_cast<int>(conv)] = best_impl(conv, level);
  d.k.fp32_to_fp16 = kernels_of(d.impl[static_cast<int>(HalfConversion::kFp32ToFp16)]).fp32_to_fp16;
  d.k.fp16_to_fp32 = kernels_of(d.impl[static_cast<int>(HalfConversion::kFp16ToFp32)]).fp16_to_fp32;
  d.k.fp32_to_bf16 = kernels_of(d.impl[static_cast<int>(HalfConversion::kFp32ToBf16)]).fp32_to_bf16;
  d.k.bf16_to_fp32 = kernels_of(d.impl[static_cast<int>(HalfConversion::kBf16ToFp32)]).bf16_to_fp32;
  return d;
}

// One table per level, built once; each call picks the one of cpu::isa() (the cap can change).
const Dispatch& dispatch() {
  static const Dispatch per_level[] = {make_dispatch(cpu::Isa::kGeneric), make_dispatch(cpu::Isa::kAvx2),
                                       make_dispatch(cpu::Isa::kAvx512), make_dispatch(cpu::Isa::kAvx512Bf16),
                                       make_dispatch(cpu::Isa::kAmx)};
  return per_level[static_cast<int>(cpu::isa())];
}

const Kernels& usable_kernels(HalfImpl impl, HalfConversion conv) {
  static const Kernels table[] = {kernels_of(HalfImpl::kScalar), kernels_of(HalfImpl::kF16C),
                                  kernels_of(HalfImpl::kAvx2), kernels_of(HalfImpl::kAvx512),
                                  kernels_of(HalfImpl::kAvx512Bf16)};
  MT_INTERNAL_ASSERT(cpu_supports(impl) && implements(impl, conv), "half conversion implementation ", to_string(impl),
                     " cannot run ", to_string(conv), " at ISA level ", cpu::to_string(cpu::isa()));
  return table[static_cast<int>(impl)];
}

}  // namespace

std::string_view to_string(HalfImpl impl) {
  switch (impl) {
    case HalfImpl::kScalar: return "scalar";
    case HalfImpl::kF16C: return "f16c";
    case HalfImpl::kAvx2: return "avx2";
    case HalfImpl::kAvx512: return "avx512";
    case HalfImpl::kAvx512Bf16: return "avx512bf16";
  }
  return "?";
}

std::string_view to_string(HalfConversion conv) {
  switch (conv) {
    case HalfConversion::kFp32ToFp16: return "fp32->fp16";
    case HalfConversion::kFp16ToFp32: return "fp16->fp32";
    case HalfConversion::kFp32ToBf16: return "fp32->bf16";
    case HalfConversion::kBf16ToFp32: return "bf16->fp32";
  }
  return "?";
}

bool cpu_supports(HalfImpl impl) { return runs_at(impl, cpu::isa()); }

bool implements(HalfImpl impl, HalfConversion conv) { return has_kernel(kernels_of(impl), conv); }

std::vector<HalfImpl> supported_half_impls(HalfConversion conv) {
  std::vector<HalfImpl> out;
  for (HalfImpl impl : kAllHalfImpls) {
    if (cpu_supports(impl) && implements(impl, conv)) out.push_back(impl);
  }
  return out;
}

HalfImpl selected_half_impl(HalfConversion conv) { return dispatch().impl[static_cast<int>(conv)]; }

void convert_fp32_to_fp16_using(HalfImpl impl, const float* src, float16* dst, int64_t n) {
  MT_CHECK(n >= 0, "convert_fp32_to_fp16: n must be >= 0, got ", n);
  if (n > 0) usable_kernels(impl, HalfConversion::kFp32ToFp16).fp32_to_fp16(src, dst, n);
}
void convert_fp16_to_fp32_using(HalfImpl impl, const float16* src, float* dst, int64_t n) {
  MT_CHECK(n >= 0, "convert_fp16_to_fp32: n must be >= 0, got ", n);
  if (n > 0) usable_kernels(impl, HalfConversion::kFp16ToFp32).fp16_to_fp32(src, dst, n);
}
void convert_fp32_to_bf16_using(HalfImpl impl, const float* src, bfloat16* dst, int64_t n) {
  MT_CHECK(n >= 0, "convert_fp32_to_bf16: n must be >= 0, got ", n);
  if (n > 0) usable_kernels(impl, HalfConversion::kFp32ToBf16).fp32_to_bf16(src, dst, n);
}
void convert_bf16_to_fp32_using(HalfImpl impl, const bfloat16* src, float* dst, int64_t n) {
  MT_CHECK(n >= 0, "convert_bf16_to_fp32: n must be >= 0, got ", n);
  if (n > 0) usable_kernels(impl, HalfConversion::kBf16ToFp32).bf16_to_fp32(src, dst, n);
}

}  // namespace detail

void convert_fp32_to_fp16(const float* src, float16* dst, int64_t n) {
  MT_CHECK(n >= 0, "convert_fp32_to_fp16: n must be >= 0, got ", n);
  if (n > 0) detail::dispatch().k.fp32_to_fp16(src, dst, n);
}
void convert_fp16_to_fp32(const float16* src, float* dst, int64_t n) {
  MT_CHECK(n >= 0, "convert_fp16_to_fp32: n must be >= 0, got ", n);
  if (n > 0) detail::dispatch().k.fp16_to_fp32(src, dst, n);
}
void convert_fp32_to_bf16(const float* src, bfloat16* dst, int64_t n) {
  MT_CHECK(n >= 0, "convert_fp32_to_bf16: n must be >= 0, got ", n);
  if (n > 0) detail::dispatch().k.fp32_to_bf16(src, dst, n);
}
void convert_bf16_to_fp32(const bfloat16* src, float* dst, int64_t n) {
  MT_CHECK(n >= 0, "convert_bf16_to_fp32: n must be >= 0, got ", n);
  if (n > 0) detail::dispatch().k.bf16_to_fp32(src, dst, n);
}

namespace {

template <typename S, typename D>
void convert_rows(void (*kernel)(const S*, D*, int64_t), const char* what, const S* src, int64_t src_stride, D* dst,
                  int64_t dst_stride, int64_t rows, int64_t n) {
  MT_CHECK(n >= 0 && rows >= 0, what, ": rows and n must be >= 0, got ", rows, " and ", n);
  MT_CHECK(src_stride >= 0 && dst_stride >= 0, what, ": strides must be >= 0, got ", src_stride, " and ", dst_stride);
  if (n == 0) return;
  for (int64_t r = 0; r < rows; ++r) {
    detail::prefetch_row_ahead(src, src_stride, r, rows, n);
    kernel(src + r * src_stride, dst + r * dst_stride, n);
  }
}

}  // namespace

void convert_fp32_to_fp16_rows(const float* src, int64_t src_stride, float16* dst, int64_t dst_stride, int64_t rows,
                               int64_t n) {
  convert_rows(detail::dispatch().k.fp32_to_fp16, "convert_fp32_to_fp16_rows", src, src_stride, dst, dst_stride, rows, n);
}
void convert_fp16_to_fp32_rows(const float16* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                               int64_t n) {
  convert_rows(detail::dispatch().k.fp16_to_fp32, "convert_fp16_to_fp32_rows", src, src_stride, dst, dst_stride, rows, n);
}
void convert_fp32_to_bf16_rows(const float* src, int64_t src_stride, bfloat16* dst, int64_t dst_stride, int64_t rows,
                               int64_t n) {
  convert_rows(detail::dispatch().k.fp32_to_bf16, "convert_fp32_to_bf16_rows", src, src_stride, dst, dst_stride, rows, n);
}
void convert_bf16_to_fp32_rows(const bfloat16* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                               int64_t n) {
  convert_rows(detail::dispatch().k.bf16_to_fp32, "convert_bf16_to_fp32_rows", src, src_stride, dst, dst_stride, rows, n);
}

}  // namespace mixtrain
