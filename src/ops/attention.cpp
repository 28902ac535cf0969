// Attention front-ends: scaled_dot_product_attention ([..., T, D] q, k, v) and qkv_attention (the
// packed [..., T, 3 * H * D] projection of a multi-head self-attention layer). Both run the fused
// kernels of src/backends/cpu/kernels/nn_attention.cpp:
//
//   out = softmax(scale * q k^T, causal: query t sees keys s <= t) v
//
// with fp32 scores and probabilities that live only in per-thread scratch, one rounding on the
// output, and a saved per-query log-sum-exp (fp32) from which backward recomputes the
// probabilities. Saved for backward: q, k, v (for qkv_attention: the packed input itself) and the
// log-sum-exp; no [T, S] tensor is ever allocated. Under autocast both ops take the lower-precision
// policy, like the matmuls they replace.
//
// qkv_attention reads q, k and v straight out of the packed tensor through strides and writes its
// output as [..., T, H * D] (heads next to each other, the input layout of the output projection),
// so neither the split nor the head transposes are copied, and its gradient is one packed tensor.
#include <cmath>

#include "kernels/nn.h"
#include "mixtrain/autograd.h"
#include "mixtrain/nn/functional.h"
#include "ops/autocast_hook.h"

namespace mixtrain::nn::functional {
namespace {

using autograd::SavedTensor;
using autograd::TensorList;

DType stat_dtype(DType dt) { return dt == kFloat64 ? kFloat64 : kFloat32; }

double resolve_scale(const char* op, std::optional<double> scale, int64_t D, const Tensor& q) {
  MT_CHECK(D > 0 || scale.has_value(), op, ": the default scale 1/sqrt(D) needs D > 0, got ", describe(q));
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(D)));
  MT_CHECK(std::isfinite(s), op, ": scale must be finite, got ", s);
  return s;
}

// Product of the dims before the last two.
int64_t batch_numel(const Tensor& t) {
  int64_t n = 1;
  for (int d = 0; d < t.dim() - 2; ++d) n *= t.size(d);
  return n;
}

void set_strides(int64_t (&st)[3], int64_t b, int64_t h, int64_t t) {
  st[0] = b;
  st[1] = h;
  st[2] = t;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_, const Tensor& k_, const Tensor& v_, bool is_causal,
                                    std::optional<double> scale) {
  Tensor q = q_, k = k_, v = v_;
  auto region = ops::autocast(OpId::kScaledDotProductAttention, {&q, &k, &v});
  const char* op = "scaled_dot_product_attention";
  MT_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), op,
           ": q, k and v must have the same rank (at least 2: [..., T, D], [..., S, D], [..., S, Dv]), got q ",
           describe(q), ", k ", describe(k), ", v ", describe(v));
  MT_CHECK(q.is_floating_point() && k.dtype() == q.dtype() && v.dtype() == q.dtype(), op,
           ": q, k and v must share one floating-point dtype, got q ", describe(q), ", k ", describe(k), ", v ",
           describe(v));
  MT_CHECK(k.device() == q.device() && v.device() == q.device(), op, ": q, k and v must be on one device, got ",
           q.device(), ", ", k.device(), ", ", v.device());
  bool batch_match = true;
  for (int i = 0; i < q.dim() - 2; ++i) batch_match = batch_match && k.size(i) == q.size(i) && v.size(i) == q.size(i);
  MT_CHECK(batch_match && k.size(-1) == q.size(-1) && v.size(-2) == k.size(-2), op,
           ": shapes do not match [..., T, D], [..., S, D], [..., S, Dv] with equal batch dims: q ", describe(q),
           ", k ", describe(k), ", v ", describe(v));
  const int64_t N = batch_numel(q), T = q.size(-2), S = k.size(-2), D = q.size(-1), Dv = v.size(-1);

  kernels::AttentionParams p;
  p.batch = N;
  p.T = T;
  p.S = S;
  p.D = D;
  p.Dv = Dv;
  p.scale = resolve_scale(op, scale, D, q);
  p.causal = is_causal;
  set_strides(p.q_strides, T * D, 0, D);
  set_strides(p.k_strides, S * D, 0, D);
  set_strides(p.v_strides, S * Dv, 0, Dv);
  set_strides(p.o_strides, T * Dv, 0, Dv);

  const Tensor q3 = q.detach().reshape({N, T, D}).contiguous();
  const Tensor k3 = k.detach().reshape({N, S, D}).contiguous();
  const Tensor v3 = v.detach().reshape({N, S, Dv}).contiguous();
  Tensor out = Tensor::empty({N, T, Dv}, q.dtype(), q.device());
  Tensor lse = Tensor::empty({N, 1, T}, stat_dtype(q.dtype()), q.device());
  kernels::attention_fwd(q.device(), q.dtype())(q3, k3, v3, out, lse, p);
  Shape out_shape = q.shape();
  out_shape[out_shape.size() - 1] = Dv;
  out = out.view(out_shape);

  if (autograd::needs_grad({&q, &k, &v})) {
    const bool need_q = q.requires_grad(), need_k = k.requires_grad(), need_v = v.requires_grad();
    autograd::record(
        op, {q, k, v}, out,
        [sq = SavedTensor(q3), sk = SavedTensor(k3), sv = SavedTensor(v3), sl = SavedTensor(lse), p, need_q, need_k,
         need_v, q_shape = q.shape(), k_shape = k.shape(), v_shape = v.shape()](const TensorList& g) {
          const char* name = "scaled_dot_product_attention";
          const Tensor qv = sq.unpack(name), kv = sk.unpack(name), vv = sv.unpack(name);
          const Tensor go = g[0].to(qv.dtype()).contiguous();
          Tensor gq = Tensor::empty(qv.shape(), qv.dtype(), qv.device());
          Tensor gk = Tensor::empty(kv.shape(), qv.dtype(), qv.device());
          Tensor gv = Tensor::empty(vv.shape(), qv.dtype(), qv.device());
          kernels::attention_bwd(qv.device(), qv.dtype())(qv, kv, vv, go, sl.unpack(name), gq, gk, gv, p);
          return TensorList{need_q ? gq.view(q_shape) : Tensor(), need_k ? gk.view(k_shape) : Tensor(),
                            need_v ? gv.view(v_shape) : Tensor()};
        });
  }
  return out;
}

Tensor qkv_attention(const Tensor& qkv_, int64_t num_heads, bool is_causal, std::optional<double> scale) {
  Tensor qkv = qkv_;
  auto region = ops::autocast(OpId::kQkvAttention, {&qkv});
  const char* op = "qkv_attention";
  MT_CHECK(qkv.is_floating_point() && qkv.dim() >= 2, op,
           ": expected a floating-point input [..., T, 3 * num_heads * head_dim] (at least 2-D), got ", describe(qkv));
  MT_CHECK(num_heads > 0 && qkv.size(-1) % (3 * num_heads) == 0, op, ": the last dim of ", describe(qkv),
           " must be 3 * num_heads * head_dim with num_heads = ", num_heads, " > 0");
  const int64_t N = batch_numel(qkv), T = qkv.size(-2), C = qkv.size(-1) / 3, H = num_heads, D = C / H;

  kernels::AttentionParams p;
  p.batch = N;
  p.heads = H;
  p.T = p.S = T;
  p.D = p.Dv = D;
  p.scale = resolve_scale(op, scale, D, qkv);
  p.causal = is_causal;
  // Packed row t of batch b: [q heads | k heads | v heads], head h at h * D within each third.
  set_strides(p.q_strides, T * 3 * C, D, 3 * C);
  set_strides(p.k_strides, T * 3 * C, D, 3 * C);
  set_strides(p.v_strides, T * 3 * C, D, 3 * C);
  set_strides(p.o_strides, T * C, D, C);

  const Tensor x = qkv.detach().reshape({N, T, 3 * C}).contiguous();
  Tensor out = Tensor::empty({N, T, C}, qkv.dtype(), qkv.device());
  Tensor lse = Tensor::empty({N, H, T}, stat_dtype(qkv.dtype()), qkv.device());
  kernels::attention_fwd(qkv.device(), qkv.dtype())(x.narrow(2, 0, C), x.narrow(2, C, C), x.narrow(2, 2 * C, C), out,
                                                    lse, p);
  Shape out_shape = qkv.shape();
  out_shape[out_shape.size() - 1] = C;
  out = out.view(out_shape);

  if (autograd::needs_grad({&qkv})) {
    autograd::record(op, {qkv}, out,
                     [sx = SavedTensor(x), sl = SavedTensor(lse), p, C, in_shape = qkv.shape()](const TensorList& g) {
                       const Tensor xv = sx.unpack("qkv_attention");
                       const Tensor go = g[0].to(xv.dtype()).contiguous();
                       Tensor gx = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
                       kernels::attention_bwd(xv.device(), xv.dtype())(xv.narrow(2, 0, C), xv.narrow(2, C, C),
                                                                       xv.narrow(2, 2 * C, C), go,
                                                                       sl.unpack("qkv_attention"), gx.narrow(2, 0, C),
                                                                       gx.narrow(2, C, C), gx.narrow(2, 2 * C, C), p);
                       return TensorList{gx.view(in_shape)};
                     });
  }
  return out;
}

}  // namespace mixtrain::nn::functional
