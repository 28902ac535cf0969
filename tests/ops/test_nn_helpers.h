// Helpers shared by the nn, loss, shape and attention op tests: inputs that a 16-bit dtype holds
// exactly, and the "16-bit run against the same math in fp32" comparison.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mixtrain/autograd.h"
#include "mixtrain/factory.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/tensor.h"
#include "support/cpu_env.h"
#include "support/expect_error.h"
#include "support/gradcheck.h"

namespace mixtrain::testing {

// A seeded standard-normal fp32 tensor times `scale`.
inline Tensor randn32(const Shape& shape, uint64_t seed, double scale = 1.0) {
  Generator g(seed);
  Tensor t = randn(shape, {}, &g);
  if (scale != 1.0) t = mul(t.to(kFloat64), scale).to(kFloat32);  // each value rounded once from fp64
  return t;
}

// x's values rounded to `dtype`, as an fp32 tensor (exactly representable in dtype), detached.
inline Tensor rounded(const Tensor& x, DType dtype) { return x.detach().to(dtype).to(kFloat32); }

inline constexpr DType kHalfDTypes[] = {kBFloat16, kFloat16};
inline constexpr nn::functional::Reduction kAllReductions[] = {
    nn::functional::Reduction::kNone, nn::functional::Reduction::kMean, nn::functional::Reduction::kSum};

// Runs f on fp32 leaves holding values representable in `dtype` and on the same values as `dtype`
// leaves; expects the 16-bit output to have `dtype` and to match the fp32 output within `tol`, and
// the gradients of every input (for one shared output gradient, also representable) to have `dtype`
// and match the fp32 ones within `grad_tol` (default: `tol`).
inline void expect_half_matches_fp32(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                     const std::vector<Tensor>& inputs32, DType dtype, const Tolerance& tol,
                                     std::optional<Tolerance> grad_tol = std::nullopt) {
  SCOPED_TRACE(std::string("dtype ") + std::string(to_string(dtype)));
  std::vector<Tensor> a, b;
  for (const Tensor& x : inputs32) {
    a.push_back(rounded(x, dtype).requires_grad_());
    b.push_back(rounded(x, dtype).to(dtype).requires_grad_());
  }
  Tensor ya = f(a), yb = f(b);
  EXPECT_EQ(yb.dtype(), dtype);
  EXPECT_CLOSE(yb.to(kFloat32), ya, tol);
  const Tensor gy = rounded(randn32(ya.shape(), 99), dtype);
  autograd::TensorList ga = autograd::grad({ya}, a, {gy});
  autograd::TensorList gb = autograd::grad({yb}, b, {gy.to(yb.dtype())});
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("input " + std::to_string(i));
    ASSERT_TRUE(gb[i].defined());
    EXPECT_EQ(gb[i].dtype(), dtype);
    EXPECT_CLOSE(gb[i].to(kFloat32), ga[i], grad_tol.value_or(tol));
  }
}

// t flattened to 1-D (a 0-d tensor becomes [1]).
inline Tensor flat(const Tensor& t) { return t.dim() == 0 ? t.unsqueeze(0) : t.reshape({-1}); }

// True when both tensors hold bit-identical values (same shape and dtype).
inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (!(a.shape() == b.shape()) || a.dtype() != b.dtype()) return false;
  const Tensor ac = a.to(Device{}).contiguous(), bc = b.to(Device{}).contiguous();  // host copies
  return std::memcmp(ac.raw_data(), bc.raw_data(), ac.nbytes()) == 0;
}

}  // namespace mixtrain::testing
