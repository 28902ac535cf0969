// Reference conv2d forward, backward-data and backward-weights: direct loops accumulating in fp64
// (the test oracle, and the fp64 kernels for gradient checks). Each output element is computed by
// one thread as a gather over its terms in a fixed order, so results do not depend on the thread
// count.
#include <algorithm>

#include "kernels/copy.h"
#include "backends/cpu/kernels/loops.h"
#include "backends/cpu/kernels/ref/linalg_ref.h"
#include "backends/cpu/kernels/host_ptr.h"

namespace mixtrain::kernels::ref {
namespace {

// Items per thread so that a parallel region gets ~2^16 multiply-adds per item run at least: the
// tiny convolutions of gradient checks stay on one thread (an OpenMP region costs more than them).
int64_t grain(int64_t work_per_item) { return std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(work_per_item, 1)); }

struct Dims {
  int64_t N, C, H, W, O, Cg, Og, KH, KW, Ho, Wo;
  Dims(const Shape& x, const Shape& w, const Shape& y, int64_t groups)
      : N(x[0]), C(x[1]), H(x[2]), W(x[3]), O(w[0]), Cg(w[1]), Og(w[0] / groups), KH(w[2]), KW(w[3]), Ho(y[2]),
        Wo(y[3]) {}
};

// One spatial axis of a window walk: steps i < n read input index start + i * step, skipped where
// that falls outside [0, size).
struct Axis {
  int64_t n, start, step, size;
};

// acc += term(i, j, ih, iw) over the steps i of `h` and j of `w` (i outer) whose input position
// (ih, iw) lies inside the image. The one walk of the forward (steps: the kernel taps of an output
// position) and of the weight gradient (steps: the output positions that read through one tap).
template <typename Term>
void accumulate_window(double& acc, const Axis& h, const Axis& w, Term&& term) {
  for (int64_t i = 0; i < h.n; ++i) {
    const int64_t ih = h.start + i * h.step;
    if (ih < 0 || ih >= h.size) continue;
    for (int64_t j = 0; j < w.n; ++j) {
      const int64_t iw = w.start + j * w.step;
      if (iw < 0 || iw >= w.size) continue;
      acc += term(i, j, ih, iw);
    }
  }
}

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv2dGeometry& g) {
  const Dims d(x.shape(), w.shape(), y.shape(), g.groups);
  Tensor X = to_f64_contiguous(x), Wt = to_f64_contiguous(w), Y = Tensor::empty(y.shape(), kFloat64, y.device());
  Tensor B = bias.defined() ? to_f64_contiguous(bias) : Tensor();
  const double* px = host_ptr<double>(X);
  const double* pw = host_ptr<double>(Wt);
  const double* pb = bias.defined() ? host_ptr<double>(B) : nullptr;
  double* py = host_ptr<double>(Y);
  parallel_for(d.N * d.O, grain(d.Ho * d.Wo * d.Cg * d.KH * d.KW), [&](int64_t begin, int64_t end) {
    for (int64_t no = begin; no < end; ++no) {
      const int64_t n = no / d.O, o = no % d.O, group = o / d.Og;
      for (int64_t oh = 0; oh < d.Ho; ++oh) {
        for (int64_t ow = 0; ow < d.Wo; ++ow) {
          double acc = pb ? pb[o] : 0.0;
          for (int64_t c = 0; c < d.Cg; ++c) {
            const int64_t ic = group * d.Cg + c;
            accumulate_window(
                acc, {d.KH, oh * g.stride_h - g.pad_h, g.dil_h, d.H}, {d.KW, ow * g.stride_w - g.pad_w, g.dil_w, d.W},
                [&](int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
                  return px[((n * d.C + ic) * d.H + ih) * d.W + iw] * pw[((o * d.Cg + c) * d.KH + kh) * d.KW + kw];
                });
          }
          py[(no * d.Ho + oh) * d.Wo + ow] = acc;
        }
      }
    }
  });
  copy(y, Y);
}

void conv2d_backward_data(const Tensor& gy, const Tensor& w, const Tensor& gx, const Conv2dGeometry& g) {
  const Dims d(gx.shape(), w.shape(), gy.shape(), g.groups);
  Tensor GY = to_f64_contiguous(gy), Wt = to_f64_contiguous(w), GX = Tensor::empty(gx.shape(), kFloat64, gx.device());
  const double* pgy = host_ptr<double>(GY);
  const double* pw = host_ptr<double>(Wt);
  double* pgx = host_ptr<double>(GX);
  parallel_for(d.N * d.C, grain(d.H * d.W * d.Og * d.KH * d.KW), [&](int64_t begin, int64_t end) {
    for (int64_t nc = begin; nc < end; ++nc) {
      const int64_t n = nc / d.C, ic = nc % d.C, group = ic / d.Cg, c = ic % d.Cg;
      for (int64_t ih = 0; ih < d.H; ++ih) {
        for (int64_t iw = 0; iw < d.W; ++iw) {
          double acc = 0.0;
          for (int64_t oo = 0; oo < d.Og; ++oo) {
            const int64_t o = group * d.Og + oo;
            for (int64_t kh = 0; kh < d.KH; ++kh) {
              const int64_t th = ih + g.pad_h - kh * g.dil_h;  // = oh * stride_h
              if (th < 0 || th % g.stride_h != 0 || th / g.stride_h >= d.Ho) continue;
              const int64_t oh = th / g.stride_h;
              for (int64_t kw = 0; kw < d.KW; ++kw) {
                const int64_t tw = iw + g.pad_w - kw * g.dil_w;
                if (tw < 0 || tw % g.stride_w != 0 || tw / g.stride_w >= d.Wo) continue;
                const int64_t ow = tw / g.stride_w;
                acc += pgy[((n * d.O + o) * d.Ho + oh) * d.Wo + ow] * pw[((o * d.Cg + c) * d.KH + kh) * d.KW + kw];
              }
            }
          }
          pgx[(nc * d.H + ih) * d.W + iw] = acc;
        }
      }
    }
  });
  copy(gx, GX);
}

void conv2d_backward_weights(const Tensor& gy, const Tensor& x, const Tensor& gw, const Tensor& gb,
                             const Conv2dGeometry& g) {
  const Dims d(x.shape(), gw.shape(), gy.shape(), g.groups);
  Tensor GY = to_f64_contiguous(gy), X = to_f64_contiguous(x), GW = Tensor::empty(gw.shape(), kFloat64, gw.device());
  const double* pgy = host_ptr<double>(GY);
  const double* px = host_ptr<double>(X);
  double* pgw = host_ptr<double>(GW);
  parallel_for(d.O * d.Cg, grain(d.N * d.Ho * d.Wo * d.KH * d.KW), [&](int64_t begin, int64_t end) {
    for (int64_t oc = begin; oc < end; ++oc) {
      const int64_t o = oc / d.Cg, c = oc % d.Cg, ic = (o / d.Og) * d.Cg + c;
      for (int64_t kh = 0; kh < d.KH; ++kh) {
        for (int64_t kw = 0; kw < d.KW; ++kw) {
          double acc = 0.0;
          for (int64_t n = 0; n < d.N; ++n) {
            accumulate_window(
                acc, {d.Ho, kh * g.dil_h - g.pad_h, g.stride_h, d.H}, {d.Wo, kw * g.dil_w - g.pad_w, g.stride_w, d.W},
                [&](int64_t oh, int64_t ow, int64_t ih, int64_t iw) {
                  return pgy[((n * d.O + o) * d.Ho + oh) * d.Wo + ow] * px[((n * d.C + ic) * d.H + ih) * d.W + iw];
                });
          }
          pgw[(oc * d.KH + kh) * d.KW + kw] = acc;
        }
      }
    }
  });
  copy(gw, GW);
  if (gb.defined()) {
    Tensor GB = Tensor::empty(gb.shape(), kFloat64, gb.device());
    double* pgb = host_ptr<double>(GB);
    const int64_t plane = d.Ho * d.Wo;
    for (int64_t o = 0; o < d.O; ++o) {
      double acc = 0.0;
      for (int64_t n = 0; n < d.N; ++n)
        for (int64_t i = 0; i < plane; ++i) acc += pgy[(n * d.O + o) * plane + i];
      pgb[o] = acc;
    }
    copy(gb, GB);
  }
}

}  // namespace mixtrain::kernels::ref
