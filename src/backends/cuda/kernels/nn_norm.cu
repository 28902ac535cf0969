// CUDA layer_norm, forward and backward (kernels/nn.h; the CPU's: src/backends/cpu/kernels/nn_norm.cpp).
//
// Precision: 16-bit values are widened to fp32, math is fp32 (fp64 when an operand is fp64), one
// rounding on store. Determinism: every reduction has an order fixed by the shape alone, never by
// timing, and no kernel adds floats atomically, so every result is reproducible run to run.
//   One block per row (block_sum); the weight/bias gradients over the CPU's row blocks (the same
//   block size), each summed in row order into an opmath partial, then the partials in block order.
#include <cmath>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/register.h"
#include "kernels/copy.h"
#include "kernels/nn.h"

namespace mixtrain::kernels::cuda {
namespace {

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
    layer_norm_fwd_kernel<D> MT_LAUNCH(blocks_for_rows(rows), threads_for_row(cols), 0, stream_of(x))(
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
      layer_norm_bwd_gx_kernel<D> MT_LAUNCH(blocks_for_rows(rows), threads_for_row(cols), 0, s)(
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
    layer_norm_bwd_partials_kernel<D> MT_LAUNCH(grid, kThreads, 0, s)(pg, px, pm, pr, rows, cols, block_rows, pw.as<C>(),
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

}  // namespace

void register_cuda_layer_norm(const Registry& r) {
  r.floating<LayerNormFwd>(layer_norm_fwd);
  r.floating<LayerNormBwd>(layer_norm_bwd);
}

}  // namespace mixtrain::kernels::cuda
