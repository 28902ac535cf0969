// scaled_dot_product_attention: matmul, a fused scaled (and causally masked) softmax, matmul.
//
//   scores = q @ k^T                       (linalg; 16-bit under autocast's lower-precision policy)
//   attn   = softmax(scale * scores)       (one kernel: scaling, the causal mask and the softmax in
//                                           fp32, rounded once to the scores' dtype; no mask tensor)
//   out    = attn @ v
//
// The causal mask is PyTorch's is_causal: query i sees keys j <= i (top-left aligned when T != S).
// Gradients flow through the two matmuls' own backward and the softmax's fused backward
// dscores = scale * attn * (dattn - sum(dattn * attn)), which is zero at masked keys.
#include <cmath>

#include "kernels/nn.h"
#include "mixtrain/autograd.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/ops/linalg.h"
#include "ops/autocast_hook.h"

namespace mixtrain::nn::functional {
namespace {

using autograd::TensorList;

// softmax(scale * scores) over the last dim of [..., T, S] scores, masked causally if asked.
Tensor attention_softmax(const Tensor& scores, double scale, bool causal) {
  const Tensor sc = scores.contiguous();
  kernels::SoftmaxParams p;
  p.n = sc.size(-1);
  p.outer = p.n == 0 ? 0 : sc.numel() / p.n;
  p.scale = scale;
  p.causal = causal;
  p.causal_rows = sc.size(-2);
  Tensor y = Tensor::empty(sc.shape(), sc.dtype(), sc.device());
  if (y.numel() > 0) kernels::softmax_fwd(sc.device(), sc.dtype())(sc, y, p);
  if (autograd::needs_grad({&sc})) {
    autograd::record("scaled_dot_product_attention", {sc}, y, [saved = autograd::SavedTensor(y), p](const TensorList& g) {
      const Tensor yv = saved.unpack("scaled_dot_product_attention");
      const Tensor gy = g[0].to(yv.dtype()).contiguous();
      Tensor gx = Tensor::empty(yv.shape(), yv.dtype(), yv.device());
      if (gx.numel() > 0) kernels::softmax_bwd(yv.device(), yv.dtype())(gy, yv, gx, p);
      return TensorList{gx};
    });
  }
  return y;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_, const Tensor& k_, const Tensor& v_, bool is_causal,
                                    std::optional<double> scale) {
  Tensor q = q_, k = k_, v = v_;
  auto region = ops::autocast(OpId::k_scaled_dot_product_attention, {&q, &k, &v});
  const char* op = "scaled_dot_product_attention";
  MT_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), op,
           ": q, k and v must have the same rank (at least 2: [..., T, D], [..., S, D], [..., S, Dv]), got q ",
           describe(q), ", k ", describe(k), ", v ", describe(v));
  MT_CHECK(q.is_floating_point() && k.dtype() == q.dtype() && v.dtype() == q.dtype(), op,
           ": q, k and v must share one floating-point dtype, got q ", describe(q), ", k ", describe(k), ", v ",
           describe(v));
  bool batch_match = true;
  for (int i = 0; i < q.dim() - 2; ++i) batch_match = batch_match && k.size(i) == q.size(i) && v.size(i) == q.size(i);
  MT_CHECK(batch_match && k.size(-1) == q.size(-1) && v.size(-2) == k.size(-2), op,
           ": shapes do not match [..., T, D], [..., S, D], [..., S, Dv] with equal batch dims: q ", describe(q), ", k ",
           describe(k), ", v ", describe(v));
  MT_CHECK(q.size(-1) > 0 || scale.has_value(), op, ": the default scale 1/sqrt(D) needs D > 0, got q ", describe(q));
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  MT_CHECK(std::isfinite(s), op, ": scale must be finite, got ", s);

  const Tensor scores = matmul(q, k.transpose(-2, -1));
  const Tensor attn = attention_softmax(scores, s, is_causal);
  return matmul(attn, v);
}

}  // namespace mixtrain::nn::functional
