// CUDA softmax / log_softmax, forward and backward (kernels/nn.h; the CPU's: src/backends/cpu/kernels/nn_softmax.cpp).
//
// Precision: 16-bit values are widened to fp32, math is fp32 (fp64 when an operand is fp64), one
// rounding on store. Determinism: every reduction has an order fixed by the shape alone, never by
// timing, and no kernel adds floats atomically, so every result is reproducible run to run.
//   One block per row (block_max / block_sum), or one thread per column when the softmax runs over
//   a non-last dim; results agree with the CPU to rounding (another sum order, CUDA's exp / log).
#include <cmath>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/register.h"
#include "kernels/copy.h"
#include "kernels/nn.h"

namespace mixtrain::kernels::cuda {
namespace {

// fp64 when either storage type is fp64, else fp32 (the CPU's opmath2_t).
template <typename A, typename B>
using opmath2_t = std::conditional_t<std::is_same_v<A, double> || std::is_same_v<B, double>, double, float>;

template <typename C>
__device__ __forceinline__ C max_nan(C a, C b) {
  return (b > a || b != b) ? b : a;  // NaN propagates (a NaN `a` is kept: NaN > x is false)
}

// ---- softmax / log_softmax

// inner == 1: one block per row of n contiguous elements.
template <typename DX, typename DY>
__global__ void softmax_rows_kernel(const DX* x, DY* y, int64_t rows, int64_t n, bool log_softmax) {
  using C = opmath2_t<DX, DY>;
  __shared__ C scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const DX* xr = x + r * n;
    DY* yr = y + r * n;
    C m = minus_infinity<C>();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = max_nan(m, static_cast<C>(load(xr + i)));
    m = block_max(m, scratch, minus_infinity<C>());
    C s = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += exp(static_cast<C>(load(xr + i)) - m);
    s = block_sum(s, scratch);
    if (log_softmax) {
      const C ls = log(s);
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = round_to<DY>((static_cast<C>(load(xr + i)) - m) - ls);
    } else {
      const C inv = C(1) / s;
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = round_to<DY>(exp(static_cast<C>(load(xr + i)) - m) * inv);
    }
    __syncthreads();  // the next row's block_max writes scratch
  }
}

// inner > 1: one thread per (outer, column), three sweeps down the n rows.
template <typename DX, typename DY>
void softmax_columns(const DX* x, DY* y, const SoftmaxParams& p, Device device) {
  using C = opmath2_t<DX, DY>;
  const int64_t n = p.n, inner = p.inner;
  const bool log_softmax = p.log;
  for_each_index(device, p.outer * inner, [=] __device__(int64_t i) {
    const int64_t base = (i / inner) * n * inner + i % inner;
    C m = minus_infinity<C>();
    for (int64_t j = 0; j < n; ++j) m = max_nan(m, static_cast<C>(load(x + base + j * inner)));
    C s = 0;
    for (int64_t j = 0; j < n; ++j) s += exp(static_cast<C>(load(x + base + j * inner)) - m);
    s = log_softmax ? log(s) : C(1) / s;
    for (int64_t j = 0; j < n; ++j) {
      const C v = static_cast<C>(load(x + base + j * inner)) - m;
      y[base + j * inner] = round_to<DY>(log_softmax ? v - s : exp(v) * s);
    }
  }, "softmax");
}

template <typename T>
struct SoftmaxFwd {
  static void run(const Tensor& x, const Tensor& y, const SoftmaxParams& p) {
    if (y.numel() == 0) return;
    dispatch_floating(y.dtype(), "softmax", [&]<typename U>() {
      using DX = dev_t<T>;
      using DY = dev_t<U>;
      const DX* px = static_cast<const DX*>(x.raw_data());
      DY* py = static_cast<DY*>(y.raw_data());
      if (p.inner == 1) {
        DeviceGuard guard(x.device());
        softmax_rows_kernel<DX, DY> MT_LAUNCH(blocks_for_rows(p.outer), threads_for_row(p.n), 0, stream_of(x))(
            px, py, p.outer, p.n, p.log);
        check_launch("softmax");
      } else {
        softmax_columns(px, py, p, x.device());
      }
    });
  }
};

// gx = y * (gy - sum(gy * y)) (softmax) or gy - exp(y) * sum(gy) (log_softmax), per row.
template <typename DX, typename DY>
__global__ void softmax_bwd_rows_kernel(const DY* gy, const DY* y, DX* gx, int64_t rows, int64_t n, bool log_softmax) {
  using C = opmath2_t<DX, DY>;
  __shared__ C scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const DY* gr = gy + r * n;
    const DY* yr = y + r * n;
    DX* out = gx + r * n;
    C acc = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const C g = static_cast<C>(load(gr + i));
      acc += log_softmax ? g : g * static_cast<C>(load(yr + i));
    }
    acc = block_sum(acc, scratch);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const C g = static_cast<C>(load(gr + i)), yv = static_cast<C>(load(yr + i));
      out[i] = round_to<DX>(log_softmax ? g - exp(yv) * acc : yv * (g - acc));
    }
    __syncthreads();  // the next row's block_sum writes scratch
  }
}

template <typename DX, typename DY>
void softmax_bwd_columns(const DY* gy, const DY* y, DX* gx, const SoftmaxParams& p, Device device) {
  using C = opmath2_t<DX, DY>;
  const int64_t n = p.n, inner = p.inner;
  const bool log_softmax = p.log;
  for_each_index(device, p.outer * inner, [=] __device__(int64_t i) {
    const int64_t base = (i / inner) * n * inner + i % inner;
    C acc = 0;
    for (int64_t j = 0; j < n; ++j) {
      const C g = static_cast<C>(load(gy + base + j * inner));
      acc += log_softmax ? g : g * static_cast<C>(load(y + base + j * inner));
    }
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      const C g = static_cast<C>(load(gy + k)), yv = static_cast<C>(load(y + k));
      gx[k] = round_to<DX>(log_softmax ? g - exp(yv) * acc : yv * (g - acc));
    }
  }, "softmax_backward");
}

template <typename T>
struct SoftmaxBwd {
  static void run(const Tensor& gy, const Tensor& y, const Tensor& gx, const SoftmaxParams& p) {
    if (gx.numel() == 0) return;
    dispatch_floating(y.dtype(), "softmax_backward", [&]<typename U>() {
      using DX = dev_t<T>;
      using DY = dev_t<U>;
      const DY* pg = static_cast<const DY*>(gy.raw_data());
      const DY* py = static_cast<const DY*>(y.raw_data());
      DX* pgx = static_cast<DX*>(gx.raw_data());
      if (p.inner == 1) {
        DeviceGuard guard(gx.device());
        softmax_bwd_rows_kernel<DX, DY> MT_LAUNCH(blocks_for_rows(p.outer), threads_for_row(p.n), 0, stream_of(gx))(
            pg, py, pgx, p.outer, p.n, p.log);
        check_launch("softmax_backward");
      } else {
        softmax_bwd_columns(pg, py, pgx, p, gx.device());
      }
    });
  }
};

}  // namespace

void register_cuda_softmax(const Registry& r) {
  r.floating<SoftmaxFwd>(softmax_fwd);
  r.floating<SoftmaxBwd>(softmax_bwd);
}

}  // namespace mixtrain::kernels::cuda
