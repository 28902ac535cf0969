// Helpers shared by the linalg and conv tests: seeded inputs, the reference-kernel oracles, and a
// guard that pins the bf16 compute path.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "kernels/cpu/ref/linalg_ref.h"
#include "kernels/linalg.h"
#include "mixtrain/factory.h"
#include "mixtrain/tensor.h"
#include "support/expect_error.h"
#include "support/gradcheck.h"

namespace mixtrain::testing {

// Seeded uniform [-1, 1) values in `dtype` (16-bit dtypes hold the rounded values exactly).
inline Tensor uniform_input(const Shape& shape, DType dtype, uint64_t seed) {
  Generator g(seed);
  Tensor t = rand(shape, {.dtype = kFloat64}, &g);
  double* p = t.data_ptr<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = 2.0 * p[i] - 1.0;
  return t.to(dtype);
}

// NumPy matmul through the reference loop, in fp64 (1-D operands and broadcast batch dims).
inline Tensor ref_matmul(const Tensor& a, const Tensor& b, const Tensor& bias = Tensor()) {
  Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  Shape batch_a(std::span<const int64_t>(a2.shape().begin(), a2.dim() - 2));
  Shape batch_b(std::span<const int64_t>(b2.shape().begin(), b2.dim() - 2));
  Shape shape = broadcast_shapes(batch_a, batch_b, "ref_matmul");
  const int rank = shape.size() + 2;
  while (a2.dim() < rank) a2 = a2.unsqueeze(0);
  while (b2.dim() < rank) b2 = b2.unsqueeze(0);
  shape.push_back(a2.size(-2));
  shape.push_back(b2.size(-1));
  Tensor out = Tensor::empty(shape, kFloat64);
  kernels::ref::matmul(a2, b2, bias, out);
  Shape result = shape;
  if (b.dim() == 1) result.erase(result.size() - 1);
  if (a.dim() == 1) result.erase(result.size() - (b.dim() == 1 ? 1 : 2));
  return out.reshape(result);
}

// Tolerance of a oneDNN product in `dtype` against the fp64 reference on the same inputs.
inline Tolerance gemm_tol(DType dtype) {
  switch (dtype) {
    case kBFloat16: return kGemmBf16;
    case kFloat16: return kGemmFp16;
    default: return kGemmFp32;
  }
}

// Pins Bf16Path for a scope (restores automatic selection afterwards).
class Bf16PathGuard {
 public:
  explicit Bf16PathGuard(kernels::Bf16Path path) { kernels::set_bf16_path(path); }
  ~Bf16PathGuard() { kernels::set_bf16_path(kernels::Bf16Path::kAuto); }
};

inline const char* path_name(kernels::Bf16Path p) {
  return p == kernels::Bf16Path::kNative ? "bf16 native" : p == kernels::Bf16Path::kFp32 ? "bf16 via fp32" : "auto";
}

}  // namespace mixtrain::testing
