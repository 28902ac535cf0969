// CUDA max / avg pooling, forward and backward (kernels/nn.h; the CPU's: src/backends/cpu/kernels/nn_pool.cpp).
//
// Precision: 16-bit values are widened to fp32, math is fp32 (fp64 when an operand is fp64), one
// rounding on store. Determinism: every reduction has an order fixed by the shape alone, never by
// timing, and no kernel adds floats atomically, so every result is reproducible run to run.
//   One thread per output (forward) or per input element (backward, which adds the outputs whose
//   window covers it in output order, as the CPU's scatter does): the CPU's bits.
#include <cmath>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/register.h"
#include "kernels/copy.h"
#include "kernels/nn.h"

namespace mixtrain::kernels::cuda {
namespace {

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

void register_cuda_pool(const Registry& r) {
  r.floating<MaxPoolFwd>(max_pool2d_fwd);
  r.floating<MaxPoolBwd>(max_pool2d_bwd);
  r.floating<AvgPoolFwd>(avg_pool2d_fwd);
  r.floating<AvgPoolBwd>(avg_pool2d_bwd);
}

}  // namespace mixtrain::kernels::cuda
