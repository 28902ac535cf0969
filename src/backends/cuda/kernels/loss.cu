// CUDA kernels of the losses (kernels/loss.h): cross_entropy / nll_loss and the pointwise losses
// (mse_loss, binary_cross_entropy, binary_cross_entropy_with_logits), forward and backward. The
// cross-entropy formulas are the CPU kernels' (src/backends/cpu/kernels/loss.cpp); the pointwise
// losses' come from the header both devices include (kernels/loss_formulas.h).
//
// Precision: fp32 math (fp64 for fp64), 16-bit values widened once, one rounding on store; each
// cross-entropy row keeps (max, log-sum-exp) in the opmath dtype for backward. Determinism: a row's
// max and sums are one block's tree; mean/sum reductions add per-block partials (a block count that
// depends only on the element count) in block order. No float atomics: results are reproducible run
// to run and agree with the CPU to rounding (another sum order, CUDA's exp / log).
//
// Host syncs: none in class_loss_fwd (the front-end's index check counts the valid rows, kernels/
// loss.h); the kBce forward reads back the first out-of-range position before computing (one sync).
#include <cmath>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/register.h"
#include "kernels/loss.h"
#include "kernels/loss_formulas.h"
#include "kernels/shape_ops.h"

namespace mixtrain::kernels::cuda {
namespace {

// ---- fixed-order sums: partials[b] = sum of value(i) over block b's grid-stride share of [0, n);
// the block count depends on n alone, and the caller adds the partials in block order.
constexpr int kMaxSumBlocks = 256;

inline int sum_blocks(int64_t n) { return static_cast<int>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, kMaxSumBlocks)); }

template <typename Acc, typename F>
__global__ void partial_sums_kernel(int64_t n, F value, Acc* partials) {
  __shared__ Acc scratch[32];
  Acc acc = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    acc += value(i);
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Launches the partial sums of value(i), i in [0, n), into `partials` (room for kMaxSumBlocks).
template <typename Acc, typename F>
void partial_sums(Device device, int64_t n, F value, Acc* partials, const char* what) {
  DeviceGuard guard(device);
  partial_sums_kernel<Acc, F> MT_LAUNCH(sum_blocks(n), kThreads, 0, mixtrain::cuda::stream(device))(n, value, partials);
  check_launch(what);
}

template <typename Acc>
__device__ __forceinline__ Acc add_partials(const Acc* partials, int blocks) {
  Acc total = 0;
  for (int b = 0; b < blocks; ++b) total += partials[b];
  return total;
}

// ---- cross_entropy / nll_loss

// cross_entropy, one block per row: m = max, s = log(sum(exp(x - m))), the row's loss (label
// smoothing as in the CPU file's header) into loss[r] (or rounded into out[r] when `out` is given);
// ignored rows get 0 and lse (0, 0).
template <typename D, typename I>
__global__ void cross_entropy_rows_kernel(const D* x, const I* target, int64_t rows, int64_t classes,
                                          int64_t ignore_index, opmath_t<D> eps, opmath_t<D>* lse,
                                          opmath_t<D>* loss, D* out) {
  using C = opmath_t<D>;
  __shared__ C scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t t = static_cast<int64_t>(target[r]);
    if (t == ignore_index) {  // the whole block takes this branch
      if (threadIdx.x == 0) {
        lse[2 * r] = lse[2 * r + 1] = C(0);
        if (out != nullptr) out[r] = round_to<D>(C(0));
        else loss[r] = C(0);
      }
      continue;
    }
    const D* xr = x + r * classes;
    C m = minus_infinity<C>();
    for (int64_t i = threadIdx.x; i < classes; i += blockDim.x) {
      const C v = load(xr + i);
      m = (v > m || v != v) ? v : m;  // NaN propagates
    }
    m = block_max(m, scratch, minus_infinity<C>());
    C e = 0;
    for (int64_t i = threadIdx.x; i < classes; i += blockDim.x) e += exp(static_cast<C>(load(xr + i)) - m);
    const C s = log(block_sum(e, scratch));
    C xsum = 0;
    if (eps != C(0)) {  // uniform over the block
      for (int64_t i = threadIdx.x; i < classes; i += blockDim.x) xsum += load(xr + i);
      xsum = block_sum(xsum, scratch);
    }
    if (threadIdx.x == 0) {
      const C xt = load(xr + t);
      const C value = eps == C(0) ? s + (m - xt)
                                  : s + (C(1) - eps) * (m - xt) + eps * (m - xsum / static_cast<C>(classes));
      lse[2 * r] = m;
      lse[2 * r + 1] = s;
      if (out != nullptr) out[r] = round_to<D>(value);
      else loss[r] = value;
    }
    __syncthreads();  // the next row's block_max writes scratch
  }
}

// The per-row losses (rounded into out when per row, else into `loss`).
template <typename D, typename I>
void class_loss_rows(const Tensor& input, const Tensor& target, const Tensor& out, const Tensor& lse,
                     const ClassLossParams& p, opmath_t<D>* loss) {
  using C = opmath_t<D>;
  const Device device = input.device();
  const int64_t M = target.numel();
  const int64_t classes = M == 0 ? 0 : input.numel() / M;
  const D* px = static_cast<const D*>(input.raw_data());
  const I* pt = static_cast<const I*>(target.raw_data());
  D* po = static_cast<D*>(out.raw_data());
  const bool per_row = p.reduction == Reduction::kNone;
  const int64_t ignore = p.ignore_index;
  if (M > 0) {
    if (p.log_probs) {
      for_each_index(device, M, [=] __device__(int64_t r) {
        const int64_t t = static_cast<int64_t>(pt[r]);
        const C value = t == ignore ? C(0) : -static_cast<C>(load(px + r * classes + t));
        if (per_row) po[r] = round_to<D>(value);
        else loss[r] = value;
      }, "nll_loss");
    } else {
      DeviceGuard guard(device);
      cross_entropy_rows_kernel<D, I> MT_LAUNCH(blocks_for_rows(M), threads_for_row(classes), 0, stream_of(input))(
          px, pt, M, classes, ignore, static_cast<C>(p.label_smoothing), static_cast<C*>(lse.raw_data()),
          per_row ? nullptr : loss, per_row ? po : nullptr);
      check_launch("cross_entropy");
    }
  }
}

template <typename T>
struct ClassLossFwd {
  static void run(const Tensor& input, const Tensor& target, const Tensor& out, const Tensor& lse,
                  const ClassLossParams& p, int64_t valid_rows) {
    using D = dev_t<T>;
    using C = opmath_t<D>;
    const Device device = input.device();
    const int64_t M = target.numel();
    const bool per_row = p.reduction == Reduction::kNone;
    // Per-row losses (for a reduction) and their partial sums.
    DeviceScratch loss(device, sizeof(C) * static_cast<size_t>(per_row ? 1 : std::max<int64_t>(M, 1)));
    DeviceScratch loss_part(device, sizeof(C) * kMaxSumBlocks);
    C* pl = loss.as<C>();
    dispatch_index(target.dtype(), "cross_entropy",
                   [&]<typename I>() { class_loss_rows<D, I>(input, target, out, lse, p, pl); });
    if (per_row) return;
    partial_sums<C>(device, M, [=] __device__(int64_t r) { return pl[r]; }, loss_part.as<C>(), "cross_entropy");
    const int blocks = sum_blocks(M);
    const bool mean = p.reduction == Reduction::kMean;
    const C* lp = loss_part.as<C>();
    const C denominator = static_cast<C>(valid_rows);
    D* po = static_cast<D*>(out.raw_data());
    for_each_index(device, 1, [=] __device__(int64_t) {
      const C total = add_partials(lp, blocks);
      // A mean over zero valid rows is 0/0 = NaN, as in PyTorch.
      po[0] = round_to<D>(mean ? total / denominator : total);
    }, "cross_entropy");
  }
};

// gx [M, C], one thread per element: (exp((x - m) - s) - eps / C) * scale, minus (1 - eps) * scale at
// the target (cross_entropy); -scale at the target (nll_loss); zero rows for ignored targets.
template <typename D, typename I>
void class_loss_grad(const Tensor& input, const Tensor& target, const Tensor& lse, const Tensor& gy, const Tensor& gx,
                     const ClassLossParams& p, int64_t valid_rows) {
  using C = opmath_t<D>;
  const int64_t M = target.numel();
  const int64_t classes = input.numel() / M;
  const D* px = static_cast<const D*>(input.raw_data());
  const I* pt = static_cast<const I*>(target.raw_data());
  const C* pl = p.log_probs ? nullptr : static_cast<const C*>(lse.raw_data());
  const D* pg = static_cast<const D*>(gy.raw_data());
  D* pgx = static_cast<D*>(gx.raw_data());
  const C eps = static_cast<C>(p.label_smoothing);
  const C sub = eps / static_cast<C>(classes);
  const bool per_row = p.reduction == Reduction::kNone, mean = p.reduction == Reduction::kMean;
  const bool log_probs = p.log_probs;
  const int64_t ignore = p.ignore_index;
  const C valid = static_cast<C>(valid_rows);
  for_each_index(gx.device(), gx.numel(), [=] __device__(int64_t i) {
    const int64_t r = i / classes, c = i % classes;
    const int64_t t = static_cast<int64_t>(pt[r]);
    C scale;
    if (per_row) {
      scale = load(pg + r);
    } else {
      const C g0 = load(pg);
      scale = mean ? g0 / valid : g0;
    }
    C v = 0;
    if (t == ignore || log_probs) {
      if (t != ignore && c == t) v = -scale;
    } else {
      v = (exp((static_cast<C>(load(px + i)) - pl[2 * r]) - pl[2 * r + 1]) - sub) * scale;
      if (c == t) v -= (C(1) - eps) * scale;
    }
    pgx[i] = round_to<D>(v);
  }, "cross_entropy_backward");
}

template <typename T>
struct ClassLossBwd {
  static void run(const Tensor& input, const Tensor& target, const Tensor& lse, const Tensor& gy, const Tensor& gx,
                  const ClassLossParams& p, int64_t valid_rows) {
    if (target.numel() == 0 || gx.numel() == 0) return;
    dispatch_index(target.dtype(), "cross_entropy", [&]<typename I>() {
      class_loss_grad<dev_t<T>, I>(input, target, lse, gy, gx, p, valid_rows);
    });
  }
};

// ---- pointwise losses: the formulas are kernels/loss_formulas.h's (shared with the CPU kernels);
// the elementary functions are CUDA's (host-callable too, so that the formulas' host-device
// templates may be instantiated for either side).
struct DeviceMath {
  template <typename C>
  __host__ __device__ static C log(C x) {
    return ::log(x);
  }
  template <typename C>
  __host__ __device__ static C log1p(C x) {
    return ::log1p(x);
  }
  template <typename C>
  __host__ __device__ static C exp(C x) {
    return ::exp(x);
  }
  template <typename C>
  __host__ __device__ static C abs(C x) {
    return ::fabs(x);
  }
};

template <typename Loss, typename T>
int64_t pointwise_forward(const Tensor& input, const Tensor& target, const Tensor& out, Reduction reduction) {
  using D = dev_t<T>;
  using C = opmath_t<D>;
  const Device device = input.device();
  const int64_t n = input.numel();
  const D* px = static_cast<const D*>(input.raw_data());
  const D* pt = static_cast<const D*>(target.raw_data());
  D* po = static_cast<D*>(out.raw_data());
  if constexpr (Loss::kProbabilities) {
    if (n > 0) {
      DeviceScratch first(device, sizeof(unsigned long long));
      const unsigned long long none = ~0ull;
      upload(device, first.as<unsigned long long>(), &none, 1);
      unsigned long long* pf = first.as<unsigned long long>();
      for_each_index(device, n, [=] __device__(int64_t i) {
        const C v = load(px + i);
        if (!(v >= C(0) && v <= C(1))) atomicMin(pf, static_cast<unsigned long long>(i));
      }, "binary_cross_entropy");
      unsigned long long bad = none;
      download(device, &bad, pf, 1);
      if (bad != none) return static_cast<int64_t>(bad);
    }
  }
  if (reduction == Reduction::kNone) {
    for_each_index(device, n, [=] __device__(int64_t i) {
      po[i] = round_to<D>(Loss::template value<DeviceMath>(static_cast<C>(load(px + i)), static_cast<C>(load(pt + i))));
    }, "pointwise loss");
    return -1;
  }
  DeviceScratch part(device, sizeof(C) * kMaxSumBlocks);
  C* pp = part.as<C>();
  partial_sums<C>(device, n, [=] __device__(int64_t i) {
    return Loss::template value<DeviceMath>(static_cast<C>(load(px + i)), static_cast<C>(load(pt + i)));
  }, pp, "pointwise loss");
  const int blocks = sum_blocks(n);
  const bool mean = reduction == Reduction::kMean;
  for_each_index(device, 1, [=] __device__(int64_t) {
    const C total = add_partials(pp, blocks);
    po[0] = round_to<D>(mean ? total / static_cast<C>(n) : total);  // n == 0: NaN, as PyTorch
  }, "pointwise loss");
  return -1;
}

template <typename Loss, typename T>
void pointwise_backward(const Tensor& input, const Tensor& target, const Tensor& gy, const Tensor& gx, const Tensor& gt,
                        Reduction reduction) {
  using D = dev_t<T>;
  using C = opmath_t<D>;
  const int64_t n = input.numel();
  const D* px = static_cast<const D*>(input.raw_data());
  const D* pt = static_cast<const D*>(target.raw_data());
  const D* pg = static_cast<const D*>(gy.raw_data());
  D* pgx = gx.defined() ? static_cast<D*>(gx.raw_data()) : nullptr;
  D* pgt = gt.defined() ? static_cast<D*>(gt.raw_data()) : nullptr;
  const bool per_element = reduction == Reduction::kNone, mean = reduction == Reduction::kMean;
  const C count = static_cast<C>(n);
  for_each_index(input.device(), n, [=] __device__(int64_t i) {
    const C x = load(px + i), t = load(pt + i);
    C g;
    if (per_element) {
      g = load(pg + i);
    } else {
      const C g0 = load(pg);
      g = mean ? g0 / count : g0;
    }
    if (pgx != nullptr) pgx[i] = round_to<D>(Loss::template dx<DeviceMath>(x, t) * g);
    if (pgt != nullptr) pgt[i] = round_to<D>(Loss::template dt<DeviceMath>(x, t) * g);
  }, "pointwise loss backward");
}

template <typename T>
struct PointwiseLossFwd {
  static int64_t run(PointwiseLoss loss, const Tensor& input, const Tensor& target, const Tensor& out,
                     Reduction reduction) {
    return loss_formulas::dispatch(loss, [&]<typename Loss>() { return pointwise_forward<Loss, T>(input, target, out, reduction); });
  }
};

template <typename T>
struct PointwiseLossBwd {
  static void run(PointwiseLoss loss, const Tensor& input, const Tensor& target, const Tensor& gy, const Tensor& gx,
                  const Tensor& gt, Reduction reduction) {
    loss_formulas::dispatch(loss, [&]<typename Loss>() { pointwise_backward<Loss, T>(input, target, gy, gx, gt, reduction); });
  }
};

}  // namespace

void register_cuda_loss(const Registry& r) {
  r.floating<ClassLossFwd>(class_loss_fwd);
  r.floating<ClassLossBwd>(class_loss_bwd);
  r.floating<PointwiseLossFwd>(pointwise_loss_fwd);
  r.floating<PointwiseLossBwd>(pointwise_loss_bwd);
}

}  // namespace mixtrain::kernels::cuda
