// embedding and dropout front-ends.
//
// embedding gathers rows of the weight (src/backends/cpu/kernels/shape_ops.cpp); its backward scatter-adds
// the output gradient into a [V, D] gradient, summing repeated indices in a fixed order.
// dropout draws its keep-mask from the counter-based Generator (src/backends/cpu/kernels/nn_dropout.cpp):
// n elements reserve ceil(n / 4) Philox blocks, so the mask depends on the seed and the generator's
// offset only, never on the thread count; the uint8 mask (1 byte per element) is saved for backward.
#include "kernels/nn.h"
#include "kernels/shape_ops.h"
#include "mixtrain/autograd.h"
#include "mixtrain/factory.h"
#include "mixtrain/nn/functional.h"
#include "ops/autocast_hook.h"

namespace mixtrain::nn::functional {

using autograd::TensorList;

Tensor embedding(const Tensor& indices_, const Tensor& weight_) {
  Tensor indices = indices_, weight = weight_;
  auto region = ops::autocast(OpId::kEmbedding, {&weight});
  MT_CHECK(weight.dim() == 2, "embedding: weight must be [num_embeddings, embedding_dim], got ", describe(weight));
  MT_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32, "embedding: indices must be int64 or int32, got ",
           describe(indices));
  MT_CHECK(indices.device() == weight.device(), "embedding: indices are on ", indices.device(), " but the weight is on ",
           weight.device());
  const int64_t V = weight.size(0), D = weight.size(1);
  const Tensor idx = indices.contiguous();
  if (auto bad = kernels::check_index(idx, V).bad) {
    MT_FAIL("embedding: index ", bad->value, " (at position ", bad->position, " of indices ", describe(indices),
            ") is out of range for a weight with V = ", V, " rows ", describe(weight), "; valid indices are 0 to ",
            V - 1);
  }
  Shape out_shape = indices.shape();
  out_shape.push_back(D);
  const Tensor wc = weight.contiguous();
  Tensor out = Tensor::empty(out_shape, weight.dtype(), weight.device());
  kernels::gather_rows(wc, idx, out, 1, D);
  if (autograd::needs_grad({&wc})) {
    autograd::record("embedding", {wc}, out, [si = autograd::SavedTensor(idx), V, D](const TensorList& g) {
      const Tensor gy = g[0].contiguous();
      Tensor gw = Tensor::empty({V, D}, gy.dtype(), gy.device());
      kernels::scatter_add_rows(gy.device(), gy.dtype())(gy, si.unpack("embedding"), gw, 1, D);
      return TensorList{gw};
    });
  }
  return out;
}

Tensor dropout(const Tensor& x_, double p, bool training, Generator* gen) {
  Tensor x = x_;
  auto region = ops::autocast(OpId::kDropout, {&x});
  MT_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability p must be in [0, 1], got ", p);
  MT_CHECK(x.is_floating_point(), "dropout: expected a floating-point input, got ", describe(x));
  if (!training || p == 0.0) return x;
  if (p == 1.0) {  // everything dropped: zeros, and a zero gradient (not a missing one)
    Tensor out = zeros(x.shape(), {.dtype = x.dtype(), .device = x.device()});
    if (autograd::needs_grad({&x})) {
      autograd::record("dropout", {x}, out, [](const TensorList& g) {
        return TensorList{zeros(g[0].shape(), {.dtype = g[0].dtype(), .device = g[0].device()})};
      });
    }
    return out;
  }
  Generator& g = gen ? *gen : default_generator();
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mask = Tensor::empty(x.shape(), kUInt8, x.device());
  const uint64_t first_block = g.advance(static_cast<uint64_t>((x.numel() + 3) / 4));
  kernels::dropout_fwd(x.device(), x.dtype())(xc, y, mask, p, g.seed(), first_block);
  if (autograd::needs_grad({&xc})) {
    // Nothing is kept for backward: the mask is a function of (seed, first_block, position), so
    // backward draws it again (a forward pass over the gradient into scratch) instead of holding a
    // byte per element from forward to backward; then the same backward kernel as with a kept mask.
    const double scale = 1.0 / (1.0 - p);
    const uint64_t seed = g.seed();
    autograd::record("dropout", {xc}, y, [p, scale, seed, first_block](const TensorList& grads) {
      const Tensor gy = grads[0].contiguous();
      Tensor regenerated = Tensor::empty(gy.shape(), kUInt8, gy.device());
      Tensor gx = Tensor::empty(gy.shape(), gy.dtype(), gy.device());
      kernels::dropout_fwd(gy.device(), gy.dtype())(gy, gx, regenerated, p, seed, first_block);
      kernels::dropout_bwd(gy.device(), gy.dtype())(gy, regenerated, gx, scale);
      return TensorList{gx};
    });
  }
  return y;
}

}  // namespace mixtrain::nn::functional
