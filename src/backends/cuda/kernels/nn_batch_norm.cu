// CUDA batch normalisation kernels (kernels/nn_batch_norm.h): statistics, normalisation, backward
// and the running-statistics update. The formulas are the CPU kernels'
// (src/backends/cpu/kernels/nn_batch_norm.cpp); x is contiguous [N, C, S].
//
// Precision: fp32 math for fp32/fp16/bf16 input (fp64 for fp64), 16-bit values widened once, one
// rounding on store; the running-statistics update in fp64 without FMA contraction, as the CPU.
// Determinism: a channel's sums over (N, S) are one block's tree (one block per channel); no
// atomics, so results are reproducible run to run. They agree with the CPU (row sums, then across
// rows) to rounding.
#include <cmath>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/register.h"
#include "kernels/nn_batch_norm.h"

namespace mixtrain::kernels::cuda {
namespace {

struct Layout {
  int64_t N, C, S;
  explicit Layout(const Tensor& x) : N(x.size(0)), C(x.size(1)), S(x.numel() / std::max<int64_t>(1, N * x.size(1))) {}
};

// Element j of channel c's N * S values (j = n * S + s) in the [N, C, S] layout.
__device__ __forceinline__ int64_t channel_offset(const Layout& L, int64_t c, int64_t j) {
  return ((j / L.S) * L.C + c) * L.S + j % L.S;
}

template <typename A>
__device__ __forceinline__ A param_or(const A* p, int64_t c, A fallback) {
  return p == nullptr ? fallback : p[c];
}

template <typename A>
const A* optional_ptr(const Tensor& t) {
  return t.defined() ? static_cast<const A*>(t.raw_data()) : nullptr;
}

// One block per channel: the mean, then the mean squared deviation from it (two passes).
template <typename D>
__global__ void stats_kernel(const D* x, Layout L, opmath_t<D>* mean, opmath_t<D>* var) {
  using A = opmath_t<D>;
  __shared__ A scratch[32];
  const int64_t count = L.N * L.S;
  const A inv_count = A(1) / static_cast<A>(count);
  for (int64_t c = blockIdx.x; c < L.C; c += gridDim.x) {
    A sum = 0;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) sum += load(x + channel_offset(L, c, j));
    const A m = block_sum(sum, scratch) * inv_count;
    A sq = 0;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const A d = load(x + channel_offset(L, c, j)) - m;
      sq += d * d;
    }
    sq = block_sum(sq, scratch);
    if (threadIdx.x == 0) {
      mean[c] = m;
      var[c] = sq * inv_count;
    }
    __syncthreads();  // the next channel's block_sum writes scratch
  }
}

template <typename T>
struct StatsKernel {
  static void run(const Tensor& x, const Tensor& mean, const Tensor& var) {
    using D = dev_t<T>;
    using A = opmath_t<D>;
    const Layout L(x);
    if (L.C == 0) return;
    DeviceGuard guard(x.device());
    stats_kernel<D> MT_LAUNCH(blocks_for_rows(L.C), threads_for_row(L.N * L.S), 0, stream_of(x))(
        static_cast<const D*>(x.raw_data()), L, static_cast<A*>(mean.raw_data()), static_cast<A*>(var.raw_data()));
    check_launch("batch_norm");
  }
};

// out = x * scale + shift with scale = w / sqrt(var + eps), shift = b - mean * scale.
template <typename T>
struct ForwardKernel {
  static void run(const Tensor& x, const Tensor& mean, const Tensor& var, double eps, const Tensor& weight,
                  const Tensor& bias, const Tensor& out) {
    using D = dev_t<T>;
    using A = opmath_t<D>;
    const Layout L(x);
    const D* px = static_cast<const D*>(x.raw_data());
    D* po = static_cast<D*>(out.raw_data());
    const A* pm = static_cast<const A*>(mean.raw_data());
    const A* pv = static_cast<const A*>(var.raw_data());
    const A* pw = optional_ptr<A>(weight);
    const A* pb = optional_ptr<A>(bias);
    const A e = static_cast<A>(eps);
    for_each_index(x.device(), x.numel(), [=] __device__(int64_t i) {
      const int64_t c = (i / L.S) % L.C;
      const A invstd = A(1) / sqrt(pv[c] + e);
      const A scale = param_or(pw, c, A(1)) * invstd;
      const A shift = param_or(pb, c, A(0)) - pm[c] * scale;
      po[i] = round_to<D>(load(px + i) * scale + shift);
    }, "batch_norm");
  }
};

// Pass 1, one block per channel: grad_bias = sum(dy), grad_weight = sum(dy * (x - mean)) * invstd.
template <typename D>
__global__ void backward_sums_kernel(const D* gy, const D* x, Layout L, const opmath_t<D>* mean,
                                     const opmath_t<D>* var, opmath_t<D> eps, opmath_t<D>* gw, opmath_t<D>* gb) {
  using A = opmath_t<D>;
  __shared__ A scratch[32];
  const int64_t count = L.N * L.S;
  for (int64_t c = blockIdx.x; c < L.C; c += gridDim.x) {
    const A m = mean[c];
    A sum_dy = 0, sum_dy_xmu = 0;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const int64_t k = channel_offset(L, c, j);
      const A dy = load(gy + k);
      sum_dy += dy;
      sum_dy_xmu += dy * (load(x + k) - m);
    }
    sum_dy = block_sum(sum_dy, scratch);
    sum_dy_xmu = block_sum(sum_dy_xmu, scratch);
    if (threadIdx.x == 0) {
      const A invstd = A(1) / sqrt(var[c] + eps);
      gb[c] = sum_dy;
      gw[c] = sum_dy_xmu * invstd;  // sum(dy * x_hat)
    }
    __syncthreads();  // the next channel's block_sum writes scratch
  }
}

template <typename T>
struct BackwardKernel {
  static void run(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& var, double eps,
                  const Tensor& weight, bool batch_stats, const Tensor& grad_x, const Tensor& grad_weight,
                  const Tensor& grad_bias) {
    using D = dev_t<T>;
    using A = opmath_t<D>;
    const Layout L(x);
    if (L.C == 0) return;
    const Device device = x.device();
    // The per-channel sums go to grad_weight / grad_bias, or to scratch when one is not wanted (dx
    // needs both in training mode).
    DeviceScratch spare(device, 2 * sizeof(A) * static_cast<size_t>(L.C));
    A* gw = grad_weight.defined() ? static_cast<A*>(grad_weight.raw_data()) : spare.as<A>();
    A* gb = grad_bias.defined() ? static_cast<A*>(grad_bias.raw_data()) : spare.as<A>() + L.C;
    const D* pg = static_cast<const D*>(grad_out.raw_data());
    const D* px = static_cast<const D*>(x.raw_data());
    const A* pm = static_cast<const A*>(mean.raw_data());
    const A* pv = static_cast<const A*>(var.raw_data());
    const A e = static_cast<A>(eps);
    {
      DeviceGuard guard(device);
      backward_sums_kernel<D> MT_LAUNCH(blocks_for_rows(L.C), threads_for_row(L.N * L.S), 0, stream_of(x))(
          pg, px, L, pm, pv, e, gw, gb);
      check_launch("batch_norm_backward");
    }
    if (!grad_x.defined()) return;
    // Pass 2: dx = a dy + k x + d per channel (the CPU file states the derivation):
    //   eval:     a = w invstd, k = d = 0
    //   training: k = -a invstd^2 sum(dy (x - mean)) / M, d = -k mean - a sum(dy) / M.
    const A* pw = optional_ptr<A>(weight);
    const A inv_count = A(1) / static_cast<A>(L.N * L.S);
    D* pdx = static_cast<D*>(grad_x.raw_data());
    for_each_index(device, x.numel(), [=] __device__(int64_t i) {
      const int64_t c = (i / L.S) % L.C;
      const A invstd = A(1) / sqrt(pv[c] + e);
      const A a = param_or(pw, c, A(1)) * invstd;
      A k = 0, d = 0;
      if (batch_stats) {
        k = -a * invstd * gw[c] * inv_count;  // gw = sum(dy (x - mean)) * invstd
        d = -k * pm[c] - a * gb[c] * inv_count;
      }
      pdx[i] = round_to<D>(a * load(pg + i) + k * load(px + i) + d);
    }, "batch_norm_backward");
  }
};

// running = (1 - momentum) running + momentum stat (var unbiased by count / (count - 1)), in fp64
// with separately rounded products and sums (__dmul_rn / __dadd_rn are never fused into an FMA), so
// the update gives the CPU's bits.
template <typename R, typename A>
void update_stats(const Tensor& running_mean, const Tensor& running_var, const Tensor& mean, const Tensor& var,
                  double momentum, int64_t count) {
  using DR = dev_t<R>;
  const int64_t C = running_mean.numel();
  DR* rm = static_cast<DR*>(running_mean.raw_data());
  DR* rv = static_cast<DR*>(running_var.raw_data());
  const int64_t sm = running_mean.stride(0), sv = running_var.stride(0);
  const A* pm = static_cast<const A*>(mean.raw_data());
  const A* pv = static_cast<const A*>(var.raw_data());
  const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
  const double keep = 1.0 - momentum;
  for_each_index(running_mean.device(), C, [=] __device__(int64_t c) {
    const double m = static_cast<double>(load(rm + c * sm)), v = static_cast<double>(load(rv + c * sv));
    const double new_m = __dadd_rn(__dmul_rn(keep, m), __dmul_rn(momentum, static_cast<double>(pm[c])));
    const double new_v =
        __dadd_rn(__dmul_rn(keep, v), __dmul_rn(__dmul_rn(momentum, static_cast<double>(pv[c])), unbias));
    rm[c * sm] = round_to<DR>(new_m);
    rv[c * sv] = round_to<DR>(new_v);
  }, "batch_norm running stats");
}

template <typename R>
struct UpdateStatsKernel {
  static void run(const Tensor& running_mean, const Tensor& running_var, const Tensor& mean, const Tensor& var,
                  double momentum, int64_t count) {
    if (mean.dtype() == kFloat64) update_stats<R, double>(running_mean, running_var, mean, var, momentum, count);
    else update_stats<R, float>(running_mean, running_var, mean, var, momentum, count);
  }
};

}  // namespace

void register_cuda_batch_norm(const Registry& r) {
  r.floating<StatsKernel>(batch_norm_stats);
  r.floating<ForwardKernel>(batch_norm_forward);
  r.floating<BackwardKernel>(batch_norm_backward);
  r.floating<UpdateStatsKernel>(batch_norm_update_stats);
}

}  // namespace mixtrain::kernels::cuda
