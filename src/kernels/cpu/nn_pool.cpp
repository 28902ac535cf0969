// CPU max_pool2d and avg_pool2d over [N, C, H, W], forward and backward.
//
// Accumulation: fp32 (fp64 for fp64 input). Each task owns whole (n, c) planes: a 16-bit plane is
// widened to fp32 once, windows are reduced in fp32 and outputs rounded once. Backward scatters into
// an fp32 copy of the input-gradient plane (overlapping windows add there, in output order) and
// rounds once; since a plane never spans two threads, the result does not depend on the thread count.
#include <limits>

#include "kernels/cpu/nn_vec.h"
#include "kernels/nn.h"

namespace mixtrain::kernels {

DispatchTable<MaxPool2dFwdFn> max_pool2d_fwd("max_pool2d");
DispatchTable<MaxPool2dBwdFn> max_pool2d_bwd("max_pool2d_backward");
DispatchTable<AvgPool2dFwdFn> avg_pool2d_fwd("avg_pool2d");
DispatchTable<AvgPool2dBwdFn> avg_pool2d_bwd("avg_pool2d_backward");

namespace {

// A window of output (oh, ow): rows [h0, h1), cols [w0, w1) clipped to the input, and its divisor
// for avg_pool2d (the window clipped to the padded input, PyTorch's count_include_pad=True).
struct Window {
  int64_t h0, h1, w0, w1, divisor;
};

inline Window window(const Pool2dParams& p, int64_t H, int64_t W, int64_t oh, int64_t ow) {
  int64_t h0 = oh * p.sh - p.ph, w0 = ow * p.sw - p.pw;
  int64_t h1 = std::min(h0 + p.kh, H + p.ph), w1 = std::min(w0 + p.kw, W + p.pw);
  const int64_t divisor = (h1 - h0) * (w1 - w0);
  return {std::max<int64_t>(h0, 0), std::min(h1, H), std::max<int64_t>(w0, 0), std::min(w1, W), divisor};
}

// Runs body(plane) for each of the `planes` (n, c) planes, whole planes per task.
template <typename Body>
void for_planes(int64_t planes, int64_t plane_work, Body&& body) {
  parallel_for(planes, nnvec::row_grain(plane_work), [&](int64_t begin, int64_t end) {
    for (int64_t pl = begin; pl < end; ++pl) body(pl);
  });
}

template <typename T>
struct MaxPoolFwd {
  static void run(const Tensor& x, const Tensor& y, const Tensor& argmax, const Pool2dParams& p) {
    using F = opmath_t<T>;
    const int64_t H = x.size(2), W = x.size(3), OH = y.size(2), OW = y.size(3);
    const T* xp = x.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    int32_t* ap = argmax.data_ptr<int32_t>();
    for_planes(x.size(0) * x.size(1), H * W + OH * OW * p.kh * p.kw, [&](int64_t pl) {
      const F* xr = nnvec::load_row(xp + pl * H * W, nnvec::scratch<F>(0, H * W), H * W);
      F* yr = nnvec::out_row(yp + pl * OH * OW, nnvec::scratch<F>(1, OH * OW));
      int32_t* ar = ap + pl * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow = 0; ow < OW; ++ow) {
          const Window win = window(p, H, W, oh, ow);
          F best = -std::numeric_limits<F>::infinity();
          int64_t best_idx = win.h0 * W + win.w0;
          // Strict '>' keeps the first maximum; a NaN wins and ends the scan (NaN propagates).
          for (int64_t h = win.h0; h < win.h1; ++h) {
            for (int64_t w = win.w0; w < win.w1; ++w) {
              const F v = xr[h * W + w];
              if (v > best || v != v) {
                best = v;
                best_idx = h * W + w;
                if (v != v) h = win.h1, w = win.w1;
              }
            }
          }
          yr[oh * OW + ow] = best;
          ar[oh * OW + ow] = static_cast<int32_t>(best_idx);
        }
      }
      nnvec::store_row(yr, yp + pl * OH * OW, OH * OW);
    });
  }
};

template <typename T>
struct MaxPoolBwd {
  static void run(const Tensor& gy, const Tensor& argmax, const Tensor& gx) {
    using F = opmath_t<T>;
    const int64_t HW = gx.size(2) * gx.size(3), OHW = gy.size(2) * gy.size(3);
    const T* gyp = gy.data_ptr<T>();
    const int32_t* ap = argmax.data_ptr<int32_t>();
    T* gxp = gx.data_ptr<T>();
    for_planes(gx.size(0) * gx.size(1), HW + OHW, [&](int64_t pl) {
      const F* gr = nnvec::load_row(gyp + pl * OHW, nnvec::scratch<F>(0, OHW), OHW);
      F* acc = nnvec::out_row(gxp + pl * HW, nnvec::scratch<F>(1, HW));
      for (int64_t i = 0; i < HW; ++i) acc[i] = F(0);
      const int32_t* ar = ap + pl * OHW;
      for (int64_t o = 0; o < OHW; ++o) acc[ar[o]] += gr[o];
      nnvec::store_row(acc, gxp + pl * HW, HW);
    });
  }
};

template <typename T>
struct AvgPoolFwd {
  static void run(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
    using F = opmath_t<T>;
    const int64_t H = x.size(2), W = x.size(3), OH = y.size(2), OW = y.size(3);
    const T* xp = x.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    for_planes(x.size(0) * x.size(1), H * W + OH * OW * p.kh * p.kw, [&](int64_t pl) {
      const F* xr = nnvec::load_row(xp + pl * H * W, nnvec::scratch<F>(0, H * W), H * W);
      F* yr = nnvec::out_row(yp + pl * OH * OW, nnvec::scratch<F>(1, OH * OW));
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow = 0; ow < OW; ++ow) {
          const Window win = window(p, H, W, oh, ow);
          F s = 0;
          for (int64_t h = win.h0; h < win.h1; ++h)
            for (int64_t w = win.w0; w < win.w1; ++w) s += xr[h * W + w];
          yr[oh * OW + ow] = s / static_cast<F>(win.divisor);
        }
      }
      nnvec::store_row(yr, yp + pl * OH * OW, OH * OW);
    });
  }
};

template <typename T>
struct AvgPoolBwd {
  static void run(const Tensor& gy, const Tensor& gx, const Pool2dParams& p) {
    using F = opmath_t<T>;
    const int64_t H = gx.size(2), W = gx.size(3), OH = gy.size(2), OW = gy.size(3);
    const T* gyp = gy.data_ptr<T>();
    T* gxp = gx.data_ptr<T>();
    for_planes(gx.size(0) * gx.size(1), H * W + OH * OW * p.kh * p.kw, [&](int64_t pl) {
      const F* gr = nnvec::load_row(gyp + pl * OH * OW, nnvec::scratch<F>(0, OH * OW), OH * OW);
      F* acc = nnvec::out_row(gxp + pl * H * W, nnvec::scratch<F>(1, H * W));
      for (int64_t i = 0; i < H * W; ++i) acc[i] = F(0);
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow = 0; ow < OW; ++ow) {
          const Window win = window(p, H, W, oh, ow);
          const F g = gr[oh * OW + ow] / static_cast<F>(win.divisor);
          for (int64_t h = win.h0; h < win.h1; ++h)
            for (int64_t w = win.w0; w < win.w1; ++w) acc[h * W + w] += g;
        }
      }
      nnvec::store_row(acc, gxp + pl * H * W, H * W);
    });
  }
};

[[maybe_unused]] const bool registered = [] {
  register_floating<MaxPoolFwd>(max_pool2d_fwd, kCPU);
  register_floating<MaxPoolBwd>(max_pool2d_bwd, kCPU);
  register_floating<AvgPoolFwd>(avg_pool2d_fwd, kCPU);
  register_floating<AvgPoolBwd>(avg_pool2d_bwd, kCPU);
  return true;
}();

}  // namespace
}  // namespace mixtrain::kernels
