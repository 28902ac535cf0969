// src/core/half.cpp: printing of float16/bfloat16, and the bulk row converters with their run-time
// choice of implementation (Note [Half conversions] in docs/notes/conversions.md).
#include "mixtrain/half.h"

#include <ostream>

#include "core/half_convert.h"
#include "mixtrain/error.h"

#if MT_HALF_X86_KERNELS
#include <cpuid.h>
#endif

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
#if MT_HALF_X86_KERNELS
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

#if MT_HALF_X86_KERNELS
struct CpuFeatures {
  bool f16c = false;  // with AVX
  bool avx2 = false;
  bool avx512 = false;  // F, BW and VL
  bool avx512bf16 = false;
};

// cpuid plus the OS check (XCR0) that the YMM / ZMM and opmask state is saved on context switch.
CpuFeatures detect_cpu_features() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return f;
  const bool osxsave = (c >> 27) & 1u;
  if (!osxsave) return f;
  uint32_t xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm_state = (xcr0_lo & 0x06u) == 0x06u;  // SSE + AVX
  const bool zmm_state = (xcr0_lo & 0xe6u) == 0xe6u;  // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool avx = ymm_state && ((c >> 28) & 1u);
  f.f16c = avx && ((c >> 29) & 1u);
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned max_subleaf = a;
  f.avx2 = avx && ((b >> 5) & 1u);
  const bool avx512f = zmm_state && ((b >> 16) & 1u);
  const bool avx512bw = (b >> 30) & 1u;
  const bool avx512vl = (b >> 31) & 1u;
  f.avx512 = avx512f && avx512bw && avx512vl;
  if (max_subleaf >= 1) {
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512bf16 = f.avx512 && ((a >> 5) & 1u);
  }
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect_cpu_features();
  return f;
}
#endif

// The kernels the public converters call, chosen on first use.
struct Dispatch {
  HalfImpl impl[4] = {};
  Kernels k;
};

HalfImpl best_impl(HalfConversion conv) {
  HalfImpl best = HalfImpl::kScalar;
  for (HalfImpl impl : kAllHalfImpls) {
    if (cpu_supports(impl) && implements(impl, conv)) best = impl;  // kAllHalfImpls is in preference order
  }
  return best;
}

Dispatch make_dispatch() {
  Dispatch d;
  for (HalfConversion conv : kAllHalfConversions) d.impl[static_cast<int>(conv)] = best_impl(conv);
  d.k.fp32_to_fp16 = kernels_of(d.impl[static_cast<int>(HalfConversion::kFp32ToFp16)]).fp32_to_fp16;
  d.k.fp16_to_fp32 = kernels_of(d.impl[static_cast<int>(HalfConversion::kFp16ToFp32)]).fp16_to_fp32;
  d.k.fp32_to_bf16 = kernels_of(d.impl[static_cast<int>(HalfConversion::kFp32ToBf16)]).fp32_to_bf16;
  d.k.bf16_to_fp32 = kernels_of(d.impl[static_cast<int>(HalfConversion::kBf16ToFp32)]).bf16_to_fp32;
  return d;
}

const Dispatch& dispatch() {
  static const Dispatch d = make_dispatch();
  return d;
}

const Kernels& usable_kernels(HalfImpl impl, HalfConversion conv) {
  static const Kernels table[] = {kernels_of(HalfImpl::kScalar), kernels_of(HalfImpl::kF16C),
                                  kernels_of(HalfImpl::kAvx2), kernels_of(HalfImpl::kAvx512),
                                  kernels_of(HalfImpl::kAvx512Bf16)};
  MT_INTERNAL_ASSERT(cpu_supports(impl) && implements(impl, conv), "half conversion implementation ", name(impl),
                     " cannot run ", name(conv), " on this machine");
  return table[static_cast<int>(impl)];
}

}  // namespace

const char* name(HalfImpl impl) {
  switch (impl) {
    case HalfImpl::kScalar: return "scalar";
    case HalfImpl::kF16C: return "f16c";
    case HalfImpl::kAvx2: return "avx2";
    case HalfImpl::kAvx512: return "avx512";
    case HalfImpl::kAvx512Bf16: return "avx512bf16";
  }
  return "?";
}

const char* name(HalfConversion conv) {
  switch (conv) {
    case HalfConversion::kFp32ToFp16: return "fp32->fp16";
    case HalfConversion::kFp16ToFp32: return "fp16->fp32";
    case HalfConversion::kFp32ToBf16: return "fp32->bf16";
    case HalfConversion::kBf16ToFp32: return "bf16->fp32";
  }
  return "?";
}

bool cpu_supports(HalfImpl impl) {
  if (impl == HalfImpl::kScalar) return true;
#if MT_HALF_X86_KERNELS
  const CpuFeatures& f = cpu_features();
  switch (impl) {
    case HalfImpl::kF16C: return f.f16c;
    case HalfImpl::kAvx2: return f.avx2;
    case HalfImpl::kAvx512: return f.avx512;
    case HalfImpl::kAvx512Bf16: return f.avx512bf16;
    default: return false;
  }
#else
  return false;
#endif
}

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

}  // namespace mixtrain
