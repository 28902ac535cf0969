// Helpers shared by the linalg and conv tests: seeded inputs, the reference-kernel oracles, a guard
// that pins the bf16 compute path, and the fixture of tests that run once per compute mode.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "backends/cpu/kernels/ref/linalg_ref.h"
#include "kernels/linalg.h"
#include "mixtrain/factory.h"
#include "mixtrain/tensor.h"
#include "support/expect_error.h"
#include "mixtrain/ops/elementwise.h"
#include "support/gradcheck.h"

namespace mixtrain::testing {

// Seeded uniform [-1, 1) values in `dtype` (16-bit dtypes hold the rounded values exactly).
inline Tensor uniform_input(const Shape& shape, DType dtype, uint64_t seed) {
  Generator g(seed);
  Tensor t = rand(shape, {.dtype = kFloat64}, &g);
  return add(mul(t, 2.0), -1.0).to(dtype);  // exact in fp64
}

// NumPy matmul through the reference loop, in fp64 (1-D operands and broadcast batch dims).
// The fp64 oracle runs on the host: device operands are copied there first (the scalar loops read
// memory directly, which a GPU's memory is not).
inline Tensor ref_matmul(const Tensor& a_any, const Tensor& b_any, const Tensor& bias_any = Tensor()) {
  const Tensor a = a_any.detach().to(Device{}), b = b_any.detach().to(Device{});
  const Tensor bias = bias_any.defined() ? bias_any.detach().to(Device{}) : Tensor();
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
  Bf16PathGuard(const Bf16PathGuard&) = delete;
  Bf16PathGuard& operator=(const Bf16PathGuard&) = delete;
};

// One way a matrix product or convolution can compute: its dtype and, for bf16, the pinned path.
struct GemmMode {
  DType dtype;
  kernels::Bf16Path path;  // only meaningful for bf16

  // The dtype oneDNN's primitive computes in: bf16 only on the native path.
  DType onednn_dtype() const { return dtype == kBFloat16 && path == kernels::Bf16Path::kNative ? kBFloat16 : kFloat32; }
};
inline const GemmMode kGemmModes[] = {{kFloat32, kernels::Bf16Path::kAuto},
                                      {kBFloat16, kernels::Bf16Path::kNative},
                                      {kBFloat16, kernels::Bf16Path::kFp32},
                                      {kFloat16, kernels::Bf16Path::kAuto}};
// The 16-bit ones (tests that compare a 16-bit run with fp32).
inline const GemmMode kHalfGemmModes[] = {{kBFloat16, kernels::Bf16Path::kNative},
                                          {kBFloat16, kernels::Bf16Path::kFp32},
                                          {kFloat16, kernels::Bf16Path::kAuto}};

// gtest prints the parameter next to each test name.
inline void PrintTo(const GemmMode& m, std::ostream* os) {
  *os << to_string(m.dtype);
  if (m.dtype == kBFloat16) *os << (m.path == kernels::Bf16Path::kNative ? " native" : " via fp32");
}

inline std::string gemm_mode_name(const ::testing::TestParamInfo<GemmMode>& info) {
  const GemmMode& m = info.param;
  if (m.dtype != kBFloat16) return std::string(to_string(m.dtype));
  return m.path == kernels::Bf16Path::kNative ? "bfloat16_native" : "bfloat16_via_fp32";
}

// Fixture of the tests that run once per GemmMode: pins the mode's bf16 path for the test. The
// native bf16 mode skips, with the reason, where oneDNN's bf16 kernels cannot run (CPUs below
// AVX-512, or MIXTRAIN_MAX_ISA below avx512); the fp32-route and fp16 modes always run.
class GemmModeTest : public ::testing::TestWithParam<GemmMode> {
 protected:
  void SetUp() override {
    if (GetParam().path == kernels::Bf16Path::kNative) {
      const std::string why = kernels::native_bf16_unavailable_reason();
      if (!why.empty()) GTEST_SKIP() << "native bf16 path cannot run here: " << why;
    }
    kernels::set_bf16_path(GetParam().path);
  }
  void TearDown() override { kernels::set_bf16_path(kernels::Bf16Path::kAuto); }
};

}  // namespace mixtrain::testing
