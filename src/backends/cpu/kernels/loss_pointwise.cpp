// CPU pointwise losses, forward and backward: mse_loss, binary_cross_entropy (on probabilities, logs
// clamped at -100 as in PyTorch) and binary_cross_entropy_with_logits (the stable form).
//
// Accumulation: fp32 (fp64 for fp64 input): each element's loss is computed in fp32 from the widened
// inputs; mean/sum reductions add fixed blocks in order (nnvec::block_sums), so the result does not
// depend on the thread count. Element outputs and gradients are rounded once on store.
#include <cmath>

#include "backends/cpu/kernels/nn_vec.h"
#include "kernels/loss.h"
#include "backends/cpu/kernels/host_ptr.h"
#include "backends/cpu/kernels/register.h"

namespace mixtrain::kernels {


namespace {

// Each loss: value(x, t), and its derivatives dx(x, t) and dt(x, t).
struct Mse {
  static constexpr bool kProbabilities = false;
  template <typename F>
  static F value(F x, F t) {
    return (x - t) * (x - t);
  }
  template <typename F>
  static F dx(F x, F t) {
    return F(2) * (x - t);
  }
  template <typename F>
  static F dt(F x, F t) {
    return F(2) * (t - x);
  }
};

struct Bce {
  static constexpr bool kProbabilities = true;
  // PyTorch clamps both logs at -100 so that p = 0 or 1 gives a finite loss.
  template <typename F>
  static F log_p(F p) {
    return std::max(std::log(p), F(-100));
  }
  template <typename F>
  static F log_1mp(F p) {
    return std::max(std::log1p(-p), F(-100));
  }
  template <typename F>
  static F value(F p, F t) {
    return -(t * log_p(p) + (F(1) - t) * log_1mp(p));
  }
  // PyTorch's gradient: (p - t) / max(p (1 - p), 1e-12).
  template <typename F>
  static F dx(F p, F t) {
    return (p - t) / std::max((F(1) - p) * p, F(1e-12));
  }
  template <typename F>
  static F dt(F p, F t) {
    return log_1mp(p) - log_p(p);
  }
};

struct BceWithLogits {
  static constexpr bool kProbabilities = false;
  // (1 - t) x + log(1 + exp(-x)), with log(1 + exp(-x)) = max(-x, 0) + log1p(exp(-|x|)): no overflow.
  template <typename F>
  static F value(F x, F t) {
    return (F(1) - t) * x + std::max(-x, F(0)) + std::log1p(std::exp(-std::abs(x)));
  }
  template <typename F>
  static F dx(F x, F t) {
    const F e = std::exp(-std::abs(x));  // sigmoid without overflow on either side
    const F sig = x >= F(0) ? F(1) / (F(1) + e) : e / (F(1) + e);
    return sig - t;
  }
  template <typename F>
  static F dt(F x, F t) {
    return -x;
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
      for (int64_t i = b; i < e; ++i) op[i] = convert<T>(Loss::value(convert<F>(xp[i]), convert<F>(tp[i])));
    });
    return -1;
  }
  const F total = nnvec::block_sums<F>(n, [&](int64_t b, int64_t e) {
    F s = 0;
    for (int64_t i = b; i < e; ++i) s += Loss::value(convert<F>(xp[i]), convert<F>(tp[i]));
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
      if (gxp) gxp[i] = convert<T>(Loss::dx(x, t) * g);
      if (gtp) gtp[i] = convert<T>(Loss::dt(x, t) * g);
    }
  });
}

// Turns the runtime loss kind into the Loss type.
template <typename F>
decltype(auto) dispatch_loss(PointwiseLoss loss, F&& f) {
  switch (loss) {
    case PointwiseLoss::kMse: return f.template operator()<Mse>();
    case PointwiseLoss::kBce: return f.template operator()<Bce>();
    case PointwiseLoss::kBceWithLogits: return f.template operator()<BceWithLogits>();
  }
  MT_INTERNAL_ASSERT(false, "unknown pointwise loss");
}

template <typename T>
struct PointwiseLossFwd {
  static int64_t run(PointwiseLoss loss, const Tensor& input, const Tensor& target, const Tensor& out,
                     Reduction reduction) {
    return dispatch_loss(loss, [&]<typename Loss>() { return forward<Loss, T>(input, target, out, reduction); });
  }
};

template <typename T>
struct PointwiseLossBwd {
  static void run(PointwiseLoss loss, const Tensor& input, const Tensor& target, const Tensor& gy, const Tensor& gx,
                  const Tensor& gt, Reduction reduction) {
    dispatch_loss(loss, [&]<typename Loss>() { backward<Loss, T>(input, target, gy, gx, gt, reduction); });
  }
};

}  // namespace

void register_cpu_pointwise_loss(const Registry& r) {
  r.floating<PointwiseLossFwd>(pointwise_loss_fwd);
  r.floating<PointwiseLossBwd>(pointwise_loss_bwd);
}

}  // namespace mixtrain::kernels
