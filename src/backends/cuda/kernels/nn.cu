// CUDA kernels of the nn ops (kernels/nn.h): softmax / log_softmax, layer_norm, dropout, and max /
// avg pooling, forward and backward. The formulas are the CPU kernels' (src/backends/cpu/kernels/nn_*.cpp).
//
// Precision: 16-bit values are widened to fp32, math is fp32 (fp64 when an operand is fp64), one
// rounding on store. Determinism: every reduction has an order fixed by the shape alone (a block's
// tree over a row, a thread's loop down a column, or fixed row blocks summed in order), never by
// timing, and no kernel adds floats atomically, so every result is reproducible run to run.
//   softmax, layer_norm: one block per row (block_max / block_sum), or one thread per column when the
//     softmax runs over a non-last dim; results agree with the CPU to rounding (another sum order,
//     CUDA's exp / log).
//   layer_norm weight/bias gradients: the CPU's row blocks (the same block size), each summed in row
//     order into an opmath partial, then the partials in block order.
//   dropout: the CPU's Philox mapping and comparison: the same mask and the same bits.
//   pooling: one thread per output (forward) or per input element (backward, which adds the outputs
//     whose window covers it in output order, as the CPU's scatter does): the CPU's bits.
#include <cmath>

#include "kernels/copy.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/philox.cuh"
#include "backends/cuda/kernels/register.h"
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
        softmax_rows_kernel<DX, DY><<<blocks_for_rows(p.outer), threads_for_row(p.n), 0, stream_of(x)>>>(
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
        softmax_bwd_rows_kernel<DX, DY><<<blocks_for_rows(p.outer), threads_for_row(p.n), 0, stream_of(gx)>>>(
            pg, py, pgx, p.outer, p.n, p.log);
        check_launch("softmax_backward");
      } else {
        softmax_bwd_columns(pg, py, pgx, p, gx.device());
      }
    });
  }
};

// ---- layer_norm

// Element i of a floating tensor whose dtype is known only at run time (a parameter may have
// another dtype than x), widened to C.
template <typename C>
__device__ __forceinline__ C load_floating(const void* p, DType dtype, int64_t i) {
  switch (dtype) {
    case kFloat64: return static_cast<C>(static_cast<const double*>(p)[i]);
    case kFloat16: return static_cast<C>(load(static_cast<const __half*>(p) + i));
    case kBFloat16: return static_cast<C>(load(static_cast<const __nv_bfloat16*>(p) + i));
    default: return static_cast<C>(static_cast<const float*>(p)[i]);
  }
}

template <typename C>
__device__ __forceinline__ void store_floating(void* p, DType dtype, int64_t i, C v) {
  switch (dtype) {
    case kFloat64: static_cast<double*>(p)[i] = static_cast<double>(v); return;
    case kFloat16: static_cast<__half*>(p)[i] = round_to<__half>(v); return;
    case kBFloat16: static_cast<__nv_bfloat16*>(p)[i] = round_to<__nv_bfloat16>(v); return;
    default: static_cast<float*>(p)[i] = static_cast<float>(v); return;
  }
}

// An optional [cols] parameter: its data (null when undefined) and dtype.
struct Param {
  const void* data = nullptr;
  DType dtype = kFloat32;
};

Param param_of(const Tensor& t, const char* op) {
  if (!t.defined()) return {};
  MT_CHECK(is_floating(t.dtype()), op, ": expected a floating-point parameter, got ", describe(t));
  MT_INTERNAL_ASSERT(t.is_contiguous(), op, ": parameters must be contiguous");
  return {t.raw_data(), t.dtype()};
}

template <typename C>
__device__ __forceinline__ C param_at(const Param& p, int64_t i, C fallback) {
  return p.data == nullptr ? fallback : load_floating<C>(p.data, p.dtype, i);
}

// One block per row: mean, biased variance (two passes over the row), then the affine output.
template <typename D>
__global__ void layer_norm_fwd_kernel(const D* x, Param w, Param b, D* y, opmath_t<D>* mean, opmath_t<D>* rstd,
                                      int64_t rows, int64_t cols, double eps) {
  using C = opmath_t<D>;
  __shared__ C scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const D* xr = x + r * cols;
    C s = 0;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) s += load(xr + i);
    const C mu = block_sum(s, scratch) / static_cast<C>(cols);
    C sq = 0;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
      const C d = load(xr + i) - mu;
      sq += d * d;
    }
    const C var = block_sum(sq, scratch) / static_cast<C>(cols);
    const C rs = C(1) / sqrt(var + static_cast<C>(eps));
    D* yr = y + r * cols;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
      yr[i] = round_to<D>((load(xr + i) - mu) * rs * param_at(w, i, C(1)) + param_at(b, i, C(0)));
    if (threadIdx.x == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    __syncthreads();  // the next row's block_sum writes scratch
  }
}

template <typename T>
struct LayerNormFwd {
  static void run(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y, const Tensor& mean,
                  const Tensor& rstd, double eps) {
    using D = dev_t<T>;
    using C = opmath_t<D>;
    const int64_t rows = mean.numel();
    if (rows == 0) return;
    const int64_t cols = x.numel() / rows;
    DeviceGuard guard(x.device());
    layer_norm_fwd_kernel<D><<<blocks_for_rows(rows), threads_for_row(cols), 0, stream_of(x)>>>(
        static_cast<const D*>(x.raw_data()), param_of(weight, "layer_norm"), param_of(bias, "layer_norm"),
        static_cast<D*>(y.raw_data()), static_cast<C*>(mean.raw_data()), static_cast<C*>(rstd.raw_data()), rows, cols,
        eps);
    check_launch("layer_norm");
  }
};

// gx, one block per row: gx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = gy * w.
template <typename D>
__global__ void layer_norm_bwd_gx_kernel(const D* gy, const D* x, Param w, const opmath_t<D>* mean,
                                         const opmath_t<D>* rstd, D* gx, int64_t rows, int64_t cols) {
  using C = opmath_t<D>;
  __shared__ C scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const D* xr = x + r * cols;
    const D* gr = gy + r * cols;
    const C mu = mean[r], rs = rstd[r];
    C sum_g = 0, sum_gx = 0;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
      const C g = load(gr + i) * param_at(w, i, C(1));
      sum_g += g;
      sum_gx += g * ((load(xr + i) - mu) * rs);
    }
    sum_g = block_sum(sum_g, scratch);
    sum_gx = block_sum(sum_gx, scratch);
    const C inv_n = C(1) / static_cast<C>(cols);
    const C a = sum_g * inv_n, c = sum_gx * inv_n;
    D* out = gx + r * cols;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
      out[i] = round_to<D>(rs * (load(gr + i) * param_at(w, i, C(1)) - a - ((load(xr + i) - mu) * rs) * c));
    __syncthreads();  // the next row's block_sum writes scratch
  }
}

// The CPU's row blocks (nn_norm.cpp): blocks of block_rows rows, the size a function of the row count.
constexpr int64_t kLnMaxBlocks = 64;
constexpr int64_t kLnMinBlockRows = 8;

// Weight/bias partials: thread (block b, column c) sums gy * xhat and gy over the rows of block b,
// in row order (neighbouring threads read neighbouring columns).
template <typename D>
__global__ void layer_norm_bwd_partials_kernel(const D* gy, const D* x, const opmath_t<D>* mean,
                                               const opmath_t<D>* rstd, int64_t rows, int64_t cols,
                                               int64_t block_rows, opmath_t<D>* pw, opmath_t<D>* pb) {
  using C = opmath_t<D>;
  const int64_t blk = blockIdx.y;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    C dw = 0, db = 0;
    const int64_t end = min(rows, (blk + 1) * block_rows);
    for (int64_t r = blk * block_rows; r < end; ++r) {
      const C g = load(gy + r * cols + c);
      dw += g * ((load(x + r * cols + c) - mean[r]) * rstd[r]);
      db += g;
    }
    pw[blk * cols + c] = dw;
    pb[blk * cols + c] = db;
  }
}

template <typename T>
struct LayerNormBwd {
  static void run(const Tensor& gy, const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                  const Tensor& gx, const Tensor& gweight, const Tensor& gbias) {
    using D = dev_t<T>;
    using C = opmath_t<D>;
    const int64_t rows = mean.numel();
    if (rows == 0) {  // an empty batch: the parameters get zero gradients
      if (gweight.defined()) fill_table(gweight.device(), gweight.dtype())(gweight, 0.0);
      if (gbias.defined()) fill_table(gbias.device(), gbias.dtype())(gbias, 0.0);
      return;
    }
    const int64_t cols = x.numel() / rows;
    const Device device = x.device();
    DeviceGuard guard(device);
    const cudaStream_t s = stream_of(x);
    const D* pg = static_cast<const D*>(gy.raw_data());
    const D* px = static_cast<const D*>(x.raw_data());
    const C* pm = static_cast<const C*>(mean.raw_data());
    const C* pr = static_cast<const C*>(rstd.raw_data());
    if (gx.defined()) {
      layer_norm_bwd_gx_kernel<D><<<blocks_for_rows(rows), threads_for_row(cols), 0, s>>>(
          pg, px, param_of(weight, "layer_norm_backward"), pm, pr, static_cast<D*>(gx.raw_data()), rows, cols);
      check_launch("layer_norm_backward");
    }
    if (!gweight.defined() && !gbias.defined()) return;
    if (cols == 0) return;
    const int64_t block_rows = std::max(kLnMinBlockRows, (rows + kLnMaxBlocks - 1) / kLnMaxBlocks);
    const int64_t blocks = (rows + block_rows - 1) / block_rows;  // <= kLnMaxBlocks
    const size_t bytes = sizeof(C) * static_cast<size_t>(blocks * cols);
    DeviceScratch pw(device, bytes), pb(device, bytes);
    const dim3 grid(std::min<unsigned>(grid_for(cols), 1024u), static_cast<unsigned>(blocks));
    layer_norm_bwd_partials_kernel<D><<<grid, kThreads, 0, s>>>(pg, px, pm, pr, rows, cols, block_rows, pw.as<C>(),
                                                                pb.as<C>());
    check_launch("layer_norm_backward");
    // Second stage: column c adds its block partials in block order and rounds once.
    const C* w_part = pw.as<C>();
    const C* b_part = pb.as<C>();
    void* gw = gweight.defined() ? gweight.raw_data() : nullptr;
    void* gb = gbias.defined() ? gbias.raw_data() : nullptr;
    const DType gw_dtype = gweight.defined() ? gweight.dtype() : kFloat32;
    const DType gb_dtype = gbias.defined() ? gbias.dtype() : kFloat32;
    for_each_index(device, cols, [=] __device__(int64_t c) {
      C sw = 0, sb = 0;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        sw += w_part[blk * cols + c];
        sb += b_part[blk * cols + c];
      }
      if (gw != nullptr) store_floating(gw, gw_dtype, c, sw);
      if (gb != nullptr) store_floating(gb, gb_dtype, c, sb);
    }, "layer_norm_backward");
  }
};

// ---- dropout: one thread per Philox block of 4 elements.
template <typename T>
struct DropoutFwd {
  static void run(const Tensor& x, const Tensor& y, const Tensor& mask, double p, uint64_t seed,
                  uint64_t first_block) {
    using D = dev_t<T>;
    using C = opmath_t<D>;
    const int64_t n = x.numel();
    const float keep = static_cast<float>(1.0 - p);
    const C scale = static_cast<C>(1.0 / (1.0 - p));
    const D* px = static_cast<const D*>(x.raw_data());
    D* py = static_cast<D*>(y.raw_data());
    uint8_t* pm = static_cast<uint8_t*>(mask.raw_data());
    const D zero = scalar_as<T>(0.0);
    for_each_index(x.device(), (n + 3) / 4, [=] __device__(int64_t blk) {
      uint32_t r[4];
      philox(first_block + static_cast<uint64_t>(blk), seed, 0, r);
      for (int lane = 0; lane < 4 && blk * 4 + lane < n; ++lane) {
        const int64_t i = blk * 4 + lane;
        const bool kept = uint_to_unit_float(r[lane]) < keep;
        pm[i] = kept ? 1 : 0;
        py[i] = kept ? round_to<D>(load(px + i) * scale) : zero;
      }
    }, "dropout");
  }
};

template <typename T>
struct DropoutBwd {
  static void run(const Tensor& gy, const Tensor& mask, const Tensor& gx, double scale) {
    using D = dev_t<T>;
    using C = opmath_t<D>;
    const C s = static_cast<C>(scale);
    const D* pg = static_cast<const D*>(gy.raw_data());
    const uint8_t* pm = static_cast<const uint8_t*>(mask.raw_data());
    D* px = static_cast<D*>(gx.raw_data());
    for_each_index(gx.device(), gx.numel(), [=] __device__(int64_t i) {
      px[i] = round_to<D>(load(pg + i) * static_cast<C>(pm[i]) * s);
    }, "dropout_backward");
  }
};

// ---- pooling over [N, C, H, W] planes.
struct PoolShape {
  Pool2dParams p;
  int64_t H, W, OH, OW;
};

// The window of output (oh, ow): rows [h0, h1) and cols [w0, w1) clipped to the input, its unclipped
// top-left corner (oh0, ow0) (argmax offsets count from it), and avg_pool2d's divisor: the window
// clipped to the padded input (count_include_pad). Windows are never empty (padding <= kernel / 2).
struct Window {
  int64_t h0, h1, w0, w1, oh0, ow0, divisor;
};

__device__ __forceinline__ Window window_of(const PoolShape& s, int64_t oh, int64_t ow) {
  const int64_t h0 = oh * s.p.sh - s.p.ph, w0 = ow * s.p.sw - s.p.pw;
  const int64_t h1 = min(h0 + s.p.kh, s.H + s.p.ph), w1 = min(w0 + s.p.kw, s.W + s.p.pw);
  return {max(h0, int64_t{0}), min(h1, s.H), max(w0, int64_t{0}), min(w1, s.W), h0, w0, (h1 - h0) * (w1 - w0)};
}

// The outputs along one axis whose window covers input position h: [first, last] (empty when
// first > last).
__device__ __forceinline__ void covering(int64_t h, int64_t k, int64_t stride, int64_t pad, int64_t out_size,
                                         int64_t& first, int64_t& last) {
  // Output o covers h when o * stride - pad <= h < o * stride - pad + k.
  const int64_t lo = h + pad - k + 1;
  first = lo <= 0 ? 0 : (lo + stride - 1) / stride;
  last = min((h + pad) / stride, out_size - 1);
}

PoolShape pool_shape(const Tensor& in, const Tensor& out, const Pool2dParams& p) {
  return {p, in.size(2), in.size(3), out.size(2), out.size(3)};
}

template <typename T, typename I>
void max_pool_fwd(const Tensor& x, const Tensor& y, const Tensor& argmax, const Pool2dParams& p) {
  using D = dev_t<T>;
  using C = opmath_t<D>;
  const PoolShape s = pool_shape(x, y, p);
  const D* px = static_cast<const D*>(x.raw_data());
  D* py = static_cast<D*>(y.raw_data());
  I* pa = static_cast<I*>(argmax.raw_data());
  for_each_index(x.device(), y.numel(), [=] __device__(int64_t o) {
    const int64_t plane = o / (s.OH * s.OW), oh = (o / s.OW) % s.OH, ow = o % s.OW;
    const D* xp = px + plane * s.H * s.W;
    const Window win = window_of(s, oh, ow);
    C best = minus_infinity<C>();
    int64_t bh = win.h0, bw = win.w0;
    bool done = false;
    // Strict '>' keeps the first maximum in row-major order; a NaN wins and ends the scan.
    for (int64_t h = win.h0; h < win.h1 && !done; ++h) {
      for (int64_t w = win.w0; w < win.w1; ++w) {
        const C v = load(xp + h * s.W + w);
        if (v > best || v != v) {
          best = v;
          bh = h;
          bw = w;
          if (v != v) {
            done = true;
            break;
          }
        }
      }
    }
    // The selected element itself (the maximum is exact: copying it gives the CPU's bits).
    py[o] = xp[bh * s.W + bw];
    pa[o] = static_cast<I>((bh - win.oh0) * s.p.kw + (bw - win.ow0));
  }, "max_pool2d");
}

// One thread per input element: the gradients of the outputs whose argmax is this element, added
// in output order (as the CPU adds them into its plane), in fp32 (fp64 for fp64).
template <typename T, typename I>
void max_pool_bwd(const Tensor& gy, const Tensor& argmax, const Tensor& gx, const Pool2dParams& p) {
  using D = dev_t<T>;
  using C = opmath_t<D>;
  const PoolShape s = pool_shape(gx, gy, p);
  const D* pg = static_cast<const D*>(gy.raw_data());
  const I* pa = static_cast<const I*>(argmax.raw_data());
  D* px = static_cast<D*>(gx.raw_data());
  for_each_index(gx.device(), gx.numel(), [=] __device__(int64_t i) {
    const int64_t plane = i / (s.H * s.W), h = (i / s.W) % s.H, w = i % s.W;
    const D* gp = pg + plane * s.OH * s.OW;
    const I* ap = pa + plane * s.OH * s.OW;
    int64_t oh0, oh1, ow0, ow1;
    covering(h, s.p.kh, s.p.sh, s.p.ph, s.OH, oh0, oh1);
    covering(w, s.p.kw, s.p.sw, s.p.pw, s.OW, ow0, ow1);
    C acc = 0;
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const int64_t o = oh * s.OW + ow;
        const int64_t k = static_cast<int64_t>(ap[o]);
        if (oh * s.p.sh - s.p.ph + k / s.p.kw == h && ow * s.p.sw - s.p.pw + k % s.p.kw == w) acc += load(gp + o);
      }
    }
    px[i] = round_to<D>(acc);
  }, "max_pool2d_backward");
}

template <typename T>
struct MaxPoolFwd {
  static void run(const Tensor& x, const Tensor& y, const Tensor& argmax, const Pool2dParams& p) {
    if (y.numel() == 0) return;
    if (argmax.dtype() == kInt32) return max_pool_fwd<T, int32_t>(x, y, argmax, p);
    MT_INTERNAL_ASSERT(argmax.dtype() == kUInt8, "max_pool2d: argmax must be uint8 or int32");
    max_pool_fwd<T, uint8_t>(x, y, argmax, p);
  }
};

template <typename T>
struct MaxPoolBwd {
  static void run(const Tensor& gy, const Tensor& argmax, const Tensor& gx, const Pool2dParams& p) {
    if (gx.numel() == 0) return;
    if (argmax.dtype() == kInt32) return max_pool_bwd<T, int32_t>(gy, argmax, gx, p);
    MT_INTERNAL_ASSERT(argmax.dtype() == kUInt8, "max_pool2d: argmax must be uint8 or int32");
    max_pool_bwd<T, uint8_t>(gy, argmax, gx, p);
  }
};

template <typename T>
struct AvgPoolFwd {
  static void run(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
    using D = dev_t<T>;
    using C = opmath_t<D>;
    const PoolShape s = pool_shape(x, y, p);
    const D* px = static_cast<const D*>(x.raw_data());
    D* py = static_cast<D*>(y.raw_data());
    for_each_index(x.device(), y.numel(), [=] __device__(int64_t o) {
      const int64_t plane = o / (s.OH * s.OW), oh = (o / s.OW) % s.OH, ow = o % s.OW;
      const D* xp = px + plane * s.H * s.W;
      const Window win = window_of(s, oh, ow);
      C sum = 0;
      for (int64_t h = win.h0; h < win.h1; ++h)
        for (int64_t w = win.w0; w < win.w1; ++w) sum += load(xp + h * s.W + w);
      py[o] = round_to<D>(sum / static_cast<C>(win.divisor));
    }, "avg_pool2d");
  }
};

template <typename T>
struct AvgPoolBwd {
  static void run(const Tensor& gy, const Tensor& gx, const Pool2dParams& p) {
    using D = dev_t<T>;
    using C = opmath_t<D>;
    const PoolShape s = pool_shape(gx, gy, p);
    const D* pg = static_cast<const D*>(gy.raw_data());
    D* px = static_cast<D*>(gx.raw_data());
    for_each_index(gx.device(), gx.numel(), [=] __device__(int64_t i) {
      const int64_t plane = i / (s.H * s.W), h = (i / s.W) % s.H, w = i % s.W;
      const D* gp = pg + plane * s.OH * s.OW;
      int64_t oh0, oh1, ow0, ow1;
      covering(h, s.p.kh, s.p.sh, s.p.ph, s.OH, oh0, oh1);
      covering(w, s.p.kw, s.p.sw, s.p.pw, s.OW, ow0, ow1);
      C acc = 0;
      for (int64_t oh = oh0; oh <= oh1; ++oh) {
        for (int64_t ow = ow0; ow <= ow1; ++ow) {
          const Window win = window_of(s, oh, ow);
          acc += load(gp + oh * s.OW + ow) / static_cast<C>(win.divisor);
        }
      }
      px[i] = round_to<D>(acc);
    }, "avg_pool2d_backward");
  }
};

}  // namespace

void register_cuda_nn(const Registry& r) {
  r.floating<SoftmaxFwd>(softmax_fwd);
  r.floating<SoftmaxBwd>(softmax_bwd);
  r.floating<LayerNormFwd>(layer_norm_fwd);
  r.floating<LayerNormBwd>(layer_norm_bwd);
  r.floating<DropoutFwd>(dropout_fwd);
  r.floating<DropoutBwd>(dropout_bwd);
  r.floating<MaxPoolFwd>(max_pool2d_fwd);
  r.floating<MaxPoolBwd>(max_pool2d_bwd);
  r.floating<AvgPoolFwd>(avg_pool2d_fwd);
  r.floating<AvgPoolBwd>(avg_pool2d_bwd);
}

}  // namespace mixtrain::kernels::cuda
