// CPU pointwise losses, forward and backward: mse_loss, binary_cross_entropy (on probabilities, logs
// clamped at -100 as in PyTorch) and binary_cross_entropy_with_logits (the stable form).
//
// Accumulation: fp32 (fp64 for fp64 input): each element's loss is computed in fp32 from the widened
// inputs; mean/sum reductions add fixed blocks in order (nnvec::block_sums), so the result does not
// depend on the thread count. Element outputs and gradients are rounded once on store.
#include <cmath>

#include "backends/cpu/kernels/nn_vec.h"
#include "kernels/loss.h"
#include "kernels/loss_formulas.h"
#include "backends/cpu/kernels/host_ptr.h"
#include "backends/cpu/kernels/register.h"

namespace mixtrain::kernels {
namespace {

// The formulas are kernels/loss_formulas.h's (shared with the CUDA kernels); the CPU's elementary
// functions are the standard library's.
struct HostMath {
  template <typename C>
  static C log(C x) {
    return std::log(x);
  }
  template <typename C>
  static C log1p(C x) {
    return std::log1p(x);
  }
  template <typename C>
  static C exp(C x) {
    return std::exp(x);
  }
  template <typename C>
  static C abs(C x) {
    return std::abs(x);
  }
};

template <typename Loss, typename T>
int64_t forward(const Tensor& input, const Tensor& target, const Tensor& out, Reduction reduction) {
  using F = opmath_t<T>;
  const int64_t n = input.numel();
  const T* xp = host_ptr<T>(input);
  const T* tp = host_ptr<T>(target);
  if constexpr (Loss::kProbabilities) {
    for (int64_t i = 0; i < n; ++i) {
      const F v = convert<F>(xp[i]);
      if (!(v >= F(0) && v <= F(1))) return i;
    }
  }
  T* op = host_ptr<T>(out);
  if (reduction == Reduction::kNone) {
    parallel_for(n, kGrainSize / 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) op[i] = convert<T>(Loss::template value<HostMath>(convert<F>(xp[i]), convert<F>(tp[i])));
    });
    return -1;
  }
  const F total = nnvec::block_sums<F>(n, [&](int64_t b, int64_t e) {
    F s = 0;
    for (int64_t i = b; i < e; ++i) s += Loss::template value<HostMath>(convert<F>(xp[i]), convert<F>(tp[i]));
    return s;
  });
  op[0] = convert<T>(reduction == Reduction::kMean ? total / static_cast<F>(n) : total);  // n == 0: NaN, as PyTorch
  return -1;
}

template <typename Loss, typename T>
void backward(const Tensor& input, const Tensor& target, const Tensor& gy, const Tensor& gx, const Tensor& gt,
              Reduction reduction) {
  using F = opmath_t<T>;
  const int64_t n = input.numel();
  const T* xp = host_ptr<T>(input);
  const T* tp = host_ptr<T>(target);
  const T* gyp = host_ptr<T>(gy);
  T* gxp = gx.defined() ? host_ptr<T>(gx) : nullptr;
  T* gtp = gt.defined() ? host_ptr<T>(gt) : nullptr;
  const bool per_element = reduction == Reduction::kNone;
  const F common = per_element ? F(0)
                   : reduction == Reduction::kMean ? convert<F>(gyp[0]) / static_cast<F>(n)
                                                   : convert<F>(gyp[0]);
  parallel_for(n, kGrainSize / 8, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const F x = convert<F>(xp[i]), t = convert<F>(tp[i]);
      const F g = per_element ? convert<F>(gyp[i]) : common;
      if (gxp) gxp[i] = convert<T>(Loss::template dx<HostMath>(x, t) * g);
      if (gtp) gtp[i] = convert<T>(Loss::template dt<HostMath>(x, t) * g);
    }
  });
}

template <typename T>
struct PointwiseLossFwd {
  static int64_t run(PointwiseLoss loss, const Tensor& input, const Tensor& target, const Tensor& out,
                     Reduction reduction) {
    return loss_formulas::dispatch(loss, [&]<typename Loss>() { return forward<Loss, T>(input, target, out, reduction); });
  }
};

template <typename T>
struct PointwiseLossBwd {
  static void run(PointwiseLoss loss, const Tensor& input, const Tensor& target, const Tensor& gy, const Tensor& gx,
                  const Tensor& gt, Reduction reduction) {
    loss_formulas::dispatch(loss, [&]<typename Loss>() { backward<Loss, T>(input, target, gy, gx, gt, reduction); });
  }
};

}  // namespace

void register_cpu_pointwise_loss(const Registry& r) {
  r.floating<PointwiseLossFwd>(pointwise_loss_fwd);
  r.floating<PointwiseLossBwd>(pointwise_loss_bwd);
}

}  // namespace mixtrain::kernels
