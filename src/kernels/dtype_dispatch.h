// Calling a kernel template with the C++ element type of a runtime dtype: shared by the CPU kernels
// (backends/cpu/kernels/loops.h) and the CUDA kernels (backends/cuda/kernels/common.cuh, which maps the 16-bit host
// types to CUDA's with dev_t).
#pragma once

#include "mixtrain/dtype.h"
#include "mixtrain/error.h"
#include "mixtrain/half.h"

namespace mixtrain::kernels {

// Calls f.template operator()<T>() with T the C++ type of `dtype` (floating dtypes only).
template <typename F>
decltype(auto) dispatch_floating(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case kFloat32: return f.template operator()<float>();
    case kFloat64: return f.template operator()<double>();
    case kFloat16: return f.template operator()<float16>();
    case kBFloat16: return f.template operator()<bfloat16>();
    default: MT_FAIL(op, ": expected a floating-point tensor (float32, float64, float16, bfloat16), got ", dtype);
  }
}

// Same for every dtype.
template <typename F>
decltype(auto) dispatch_all(DType dtype, F&& f) {
  switch (dtype) {
    case kFloat32: return f.template operator()<float>();
    case kFloat64: return f.template operator()<double>();
    case kFloat16: return f.template operator()<float16>();
    case kBFloat16: return f.template operator()<bfloat16>();
    case kInt32: return f.template operator()<int32_t>();
    case kInt64: return f.template operator()<int64_t>();
    case kUInt8: return f.template operator()<uint8_t>();
    case kBool: return f.template operator()<bool>();
  }
  MT_INTERNAL_ASSERT(false, "unknown dtype");
}

}  // namespace mixtrain::kernels
