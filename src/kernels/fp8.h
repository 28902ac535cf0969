// FP8 quantisation kernels (emulated FP8 training): a 16-bit or fp32 tensor -> fp8 codes stored as
// uint8, with the amax of the source, and fp8 codes -> fp32 values.
//
// quantize:   dst[i] = fp8_training_bits(float(src[i]) * scale, isfinite(src[i]), format)
//             (mixtrain/float8.h: round to nearest even, finite values saturate at +-max, inf/NaN
//             stay non-finite); returns max |src[i]| in fp32 (NaN when any element is NaN, inf
//             when any is inf). The product is one fp32 multiply, as a GPU kernel computes it.
// dequantize: dst[i] = value(src[i]) * scale_inv in fp32 (the exact fp8 value times the inverse
//             scale, one rounding).
// Both tensors contiguous with the same number of elements and on one device. quantize is keyed by
// src's dtype (fp32, bf16, fp16), dequantize by dst's (fp32). Results do not depend on the thread
// count.
#pragma once

#include "kernels/dispatch.h"
#include "mixtrain/float8.h"
#include "mixtrain/tensor.h"

namespace mixtrain::kernels {

using Fp8QuantizeFn = float(const Tensor& dst_codes, const Tensor& src, float scale, Fp8Format format);
using Fp8DequantizeFn = void(const Tensor& dst, const Tensor& src_codes, float scale_inv, Fp8Format format);
MT_KERNEL_TABLE(DispatchTable<Fp8QuantizeFn>, fp8_quantize_table, "fp8 quantize");
MT_KERNEL_TABLE(DispatchTable<Fp8DequantizeFn>, fp8_dequantize_table, "fp8 dequantize");

inline void check_fp8_operands(const char* op, const Tensor& values, const Tensor& codes) {
  MT_CHECK(codes.dtype() == kUInt8 && codes.is_contiguous() && values.is_contiguous() &&
               codes.numel() == values.numel() && codes.device() == values.device(),
           op, ": expected contiguous fp8 codes (uint8) and values with the same number of elements on one device, got ",
           describe(codes), " and ", describe(values));
}

inline float fp8_quantize(const Tensor& dst_codes, const Tensor& src, float scale, Fp8Format format) {
  check_fp8_operands("fp8 quantize", src, dst_codes);
  return fp8_quantize_table(src.device(), src.dtype())(dst_codes, src, scale, format);
}

inline void fp8_dequantize(const Tensor& dst, const Tensor& src_codes, float scale_inv, Fp8Format format) {
  check_fp8_operands("fp8 dequantize", dst, src_codes);
  fp8_dequantize_table(dst.device(), dst.dtype())(dst, src_codes, scale_inv, format);
}

}  // namespace mixtrain::kernels
