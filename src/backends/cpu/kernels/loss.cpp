// CPU cross_entropy (fused log-softmax + NLL, with ignore_index and label smoothing) and nll_loss,
// forward and backward.
//
// Accumulation: fp32 (fp64 for fp64 input). A 16-bit logits row is widened to fp32 once; its max m,
// log-sum s = log(sum exp(x - m)) and loss are computed in fp32, and (m, s) are kept (fp32) for
// backward, which writes (softmax - target distribution) * scale in one pass over the row and rounds
// once. Row losses are reduced with nnvec::block_sums (fixed block order): independent of the thread
// count.
//
// With label smoothing eps over C classes (PyTorch's formula), with lse = m + s, a row's loss is
//   (1 - eps) (lse - x_t) + eps / C * sum_c (lse - x_c) = s + (1 - eps) (m - x_t) + eps (m - mean_c x_c)
// (the right side never forms lse, so large logits keep their precision) and its gradient
// softmax_c - (1 - eps) [c == t] - eps / C.
#include <cmath>
#include <vector>

#include "backends/cpu/kernels/nn_vec.h"
#include "kernels/loss.h"
#include "kernels/shape_ops.h"
#include "backends/cpu/kernels/host_ptr.h"
#include "backends/cpu/kernels/register.h"

namespace mixtrain::kernels {


namespace {

template <typename T>
struct ClassLossFwd {
  static void run(const Tensor& input, const Tensor& target, const Tensor& out, const Tensor& lse,
                  const ClassLossParams& p, int64_t valid_rows) {
    using F = opmath_t<T>;
    const int64_t M = target.numel();
    const int64_t C = M == 0 ? 0 : input.numel() / M;
    const T* xp = host_ptr<T>(input);
    F* lp = p.log_probs ? nullptr : host_ptr<F>(lse);
    const F eps = static_cast<F>(p.label_smoothing);
    std::vector<F> loss(static_cast<size_t>(M));
    dispatch_index(target.dtype(), "cross_entropy", [&]<typename I>() {
      const I* tp = host_ptr<I>(target);
      parallel_for(M, nnvec::row_grain(p.log_probs ? 1 : C), [&](int64_t begin, int64_t end) {
        F* buf = nnvec::scratch<F>(0, C);
        for (int64_t r = begin; r < end; ++r) {
          const int64_t t = tp[r];
          if (t == p.ignore_index) {
            loss[r] = F(0);
            if (lp) lp[2 * r] = lp[2 * r + 1] = F(0);
            continue;
          }
          if (p.log_probs) {
            loss[r] = -convert<F>(xp[r * C + t]);
            continue;
          }
          const F* xr = nnvec::load_row(xp + r * C, buf, C);
          const F m = nnvec::max(xr, C);
          const F s = std::log(nnvec::exp_sum(xr, m, nullptr, C));
          lp[2 * r] = m;
          lp[2 * r + 1] = s;
          loss[r] = eps == F(0) ? s + (m - xr[t])
                                : s + (F(1) - eps) * (m - xr[t]) + eps * (m - nnvec::sum(xr, C) / static_cast<F>(C));
        }
      });
    });
    T* op = host_ptr<T>(out);
    if (p.reduction == Reduction::kNone) {
      for (int64_t r = 0; r < M; ++r) op[r] = convert<T>(loss[r]);
    } else {
      const F total = nnvec::block_sums<F>(M, [&](int64_t b, int64_t e) { return nnvec::sum(loss.data() + b, e - b); });
      // A mean over zero valid rows is 0/0 = NaN, as in PyTorch.
      op[0] = convert<T>(p.reduction == Reduction::kMean ? total / static_cast<F>(valid_rows) : total);
    }
  }
};

template <typename T>
struct ClassLossBwd {
  static void run(const Tensor& input, const Tensor& target, const Tensor& lse, const Tensor& gy, const Tensor& gx,
                  const ClassLossParams& p, int64_t valid_rows) {
    using F = opmath_t<T>;
    const int64_t M = target.numel();
    const int64_t C = M == 0 ? 0 : input.numel() / M;
    const T* xp = host_ptr<T>(input);
    const F* lp = p.log_probs ? nullptr : host_ptr<F>(lse);
    const T* gyp = host_ptr<T>(gy);
    T* gxp = host_ptr<T>(gx);
    const F eps = static_cast<F>(p.label_smoothing);
    const bool per_row = p.reduction == Reduction::kNone;
    const F common = per_row ? F(0)
                     : p.reduction == Reduction::kMean ? convert<F>(gyp[0]) / static_cast<F>(valid_rows)
                                                       : convert<F>(gyp[0]);
    dispatch_index(target.dtype(), "cross_entropy", [&]<typename I>() {
      const I* tp = host_ptr<I>(target);
      parallel_for(M, nnvec::row_grain(C), [&](int64_t begin, int64_t end) {
        F* xbuf = nnvec::scratch<F>(0, C);
        F* gbuf = nnvec::scratch<F>(1, C);
        for (int64_t r = begin; r < end; ++r) {
          const int64_t t = tp[r];
          F* gr = nnvec::out_row(gxp + r * C, gbuf);
          const F scale = per_row ? convert<F>(gyp[r]) : common;
          if (t == p.ignore_index || p.log_probs) {
            for (int64_t c = 0; c < C; ++c) gr[c] = F(0);
            if (t != p.ignore_index) gr[t] = -scale;
          } else {
            const F* xr = nnvec::load_row(xp + r * C, xbuf, C);
            nnvec::exp_affine(xr, lp[2 * r], lp[2 * r + 1], eps / static_cast<F>(C), scale, gr, C);
            gr[t] -= (F(1) - eps) * scale;
          }
          nnvec::store_row(gr, gxp + r * C, C);
        }
      });
    });
  }
};

}  // namespace

void register_cpu_class_loss(const Registry& r) {
  r.floating<ClassLossFwd>(class_loss_fwd);
  r.floating<ClassLossBwd>(class_loss_bwd);
}

}  // namespace mixtrain::kernels
