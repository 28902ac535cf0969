// mixtrain/ops/elementwise.h: pointwise ops, forward and backward.
//
// dtypes: float32, float64, float16, bfloat16 (16-bit values are loaded to fp32, computed in fp32
// and rounded once on store). Binary ops broadcast (NumPy rules) and promote dtypes with
// promote_types(); a double scalar operand does not change the tensor's dtype.
// Under autocast each op follows its policy (see amp/policy.h).
#pragma once

#include "mixtrain/tensor.h"

namespace mixtrain {

Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a - alpha * b
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor pow(const Tensor& a, double exponent);
Tensor pow(const Tensor& a, const Tensor& exponent);

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
enum class GeluApproximation { kNone, kTanh };  // exact erf form, or the tanh approximation
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::kNone);
Tensor silu(const Tensor& x);
Tensor clamp(const Tensor& x, double min, double max);  // gradient 0 outside [min, max]

// where(cond, a, b): a where cond (bool) is true, else b; broadcasts all three.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// masked_fill(x, mask, value): x with `value` where mask (bool, broadcastable to x) is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// Comparisons (no gradient), result bool.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);

// Explicit dtype conversion recorded by autograd (same as x.to(dtype)).
Tensor cast(const Tensor& x, DType dtype);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return add(a, -b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(const Tensor& a, double b) { return mul(a, 1.0 / b); }

}  // namespace mixtrain
