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

// Runs body(in, out) for each of the `planes` (n, c) planes, whole planes per task: `in` is the
// plane of src (in_size elements) as F, `out` an F row for the plane of dst (out_size elements),
// rounded into dst once body returns.
template <typename F, typename T, typename Body>
void for_planes(int64_t planes, int64_t plane_work, const T* src, int64_t in_size, T* dst, int64_t out_size,
                Body&& body) {
  parallel_for(planes, nnvec::row_grain(plane_work), [&](int64_t begin, int64_t end) {
    for (int64_t pl = begin; pl < end; ++pl) {
      const F* in = nnvec::load_row(src + pl * in_size, nnvec::scratch<F>(0, in_size), in_size);
      F* out = nnvec::out_row(dst + pl * out_size, nnvec::scratch<F>(1, out_size));
      body(in, out, pl);
      nnvec::store_row(out, dst + pl * out_size, out_size);
    }
  });
}

// Runs f(o, window) for the outputs o = oh * OW + ow of an OH x OW plane, in that order.
template <typename Fn>
void for_windows(const Pool2dParams& p, int64_t H, int64_t W, int64_t OH, int64_t OW, Fn&& f) {
  for (int64_t oh = 0; oh < OH; ++oh)
    for (int64_t ow = 0; ow < OW; ++ow) f(oh * OW + ow, window(p, H, W, oh, ow));
}

template <typename T>
struct MaxPoolFwd {
  static void run(const Tensor& x, const Tensor& y, const Tensor& argmax, const Pool2dParams& p) {
    using F = opmath_t<T>;
    const int64_t H = x.size(2), W = x.size(3), OH = y.size(2), OW = y.size(3);
    int32_t* ap = argmax.data_ptr<int32_t>();
    for_planes<F>(x.size(0) * x.size(1), H * W + OH * OW * p.kh * p.kw, x.data_ptr<T>(), H * W, y.data_ptr<T>(),
                  OH * OW, [&](const F* xr, F* yr, int64_t pl) {
                    int32_t* ar = ap + pl * OH * OW;
                    for_windows(p, H, W, OH, OW, [&](int64_t o, const Window& win) {
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
                      yr[o] = best;
                      ar[o] = static_cast<int32_t>(best_idx);
                    });
                  });
  }
};

template <typename T>
struct MaxPoolBwd {
  static void run(const Tensor& gy, const Tensor& argmax, const Tensor& gx) {
    using F = opmath_t<T>;
    const int64_t HW = gx.size(2) * gx.size(3), OHW = gy.size(2) * gy.size(3);
    const int32_t* ap = argmax.data_ptr<int32_t>();
    for_planes<F>(gx.size(0) * gx.size(1), HW + OHW, gy.data_ptr<T>(), OHW, gx.data_ptr<T>(), HW,
                  [&](const F* gr, F* acc, int64_t pl) {
                    for (int64_t i = 0; i < HW; ++i) acc[i] = F(0);
                    const int32_t* ar = ap + pl * OHW;
                    for (int64_t o = 0; o < OHW; ++o) acc[ar[o]] += gr[o];
                  });
  }
};

template <typename T>
struct AvgPoolFwd {
  static void run(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
    using F = opmath_t<T>;
    const int64_t H = x.size(2), W = x.size(3), OH = y.size(2), OW = y.size(3);
    for_planes<F>(x.size(0) * x.size(1), H * W + OH * OW * p.kh * p.kw, x.data_ptr<T>(), H * W, y.data_ptr<T>(),
                  OH * OW, [&](const F* xr, F* yr, int64_t) {
                    for_windows(p, H, W, OH, OW, [&](int64_t o, const Window& win) {
                      F s = 0;
                      for (int64_t h = win.h0; h < win.h1; ++h)
                        for (int64_t w = win.w0; w < win.w1; ++w) s += xr[h * W + w];
                      yr[o] = s / static_cast<F>(win.divisor);
                    });
                  });
  }
};

template <typename T>
struct AvgPoolBwd {
  static void run(const Tensor& gy, const Tensor& gx, const Pool2dParams& p) {
    using F = opmath_t<T>;
    const int64_t H = gx.size(2), W = gx.size(3), OH = gy.size(2), OW = gy.size(3);
    for_planes<F>(gx.size(0) * gx.size(1), H * W + OH * OW * p.kh * p.kw, gy.data_ptr<T>(), OH * OW, gx.data_ptr<T>(),
                  H * W, [&](const F* gr, F* acc, int64_t) {
                    for (int64_t i = 0; i < H * W; ++i) acc[i] = F(0);
                    for_windows(p, H, W, OH, OW, [&](int64_t o, const Window& win) {
                      const F g = gr[o] / static_cast<F>(win.divisor);
                      for (int64_t h = win.h0; h < win.h1; ++h)
                        for (int64_t w = win.w0; w < win.w1; ++w) acc[h * W + w] += g;
                    });
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
