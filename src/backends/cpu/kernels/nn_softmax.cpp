// CPU softmax / log_softmax, forward and backward, over any dim. (Attention does not go through it:
// scaled_dot_product_attention and qkv_attention have their own fused kernels, nn_attention.cpp.)
//
// Accumulation: fp32 (fp64 when the input or output is fp64). 16-bit rows are widened to fp32 once,
// the max, the exp-sum and the outputs are computed in fp32, and the result is rounded once when
// stored. Rows (or column tiles, for a softmax over a non-last dim) never span two threads, so the
// results do not depend on the thread count.
#include <cmath>
#include <limits>

#include "backends/cpu/kernels/nn_vec.h"
#include "kernels/nn.h"
#include "backends/cpu/kernels/host_ptr.h"
#include "backends/cpu/kernels/register.h"

namespace mixtrain::kernels {


namespace {

// inner == 1: one contiguous row per (outer) index, the common case (the last dim).
template <typename T, typename U>
void forward_rows(const T* x, U* y, const SoftmaxParams& p) {
  using F = nnvec::opmath2_t<T, U>;
  const int64_t n = p.n;
  parallel_for(p.outer, nnvec::row_grain(n), [&](int64_t begin, int64_t end) {
    F* xbuf = nnvec::scratch<F>(0, n);
    F* ybuf = nnvec::scratch<F>(1, n);
    for (int64_t r = begin; r < end; ++r) {
      const F* xr = nnvec::load_row(x + r * n, xbuf, n);
      F* yr = nnvec::out_row(y + r * n, ybuf);
      const F m = nnvec::max(xr, n);
      if (p.log) {
        nnvec::sub2(xr, m, std::log(nnvec::exp_sum(xr, m, nullptr, n)), yr, n);
      } else {
        const F s = nnvec::exp_sum(xr, m, yr, n);
        nnvec::affine(yr, F(1) / s, F(0), yr, n);
      }
      nnvec::store_row(yr, y + r * n, n);
    }
  });
}

template <typename T, typename U>
void backward_rows(const U* gy, const U* y, T* gx, const SoftmaxParams& p) {
  using F = nnvec::opmath2_t<T, U>;
  const int64_t n = p.n;
  parallel_for(p.outer, nnvec::row_grain(n), [&](int64_t begin, int64_t end) {
    F* ybuf = nnvec::scratch<F>(0, n);
    F* gbuf = nnvec::scratch<F>(1, n);
    F* xbuf = nnvec::scratch<F>(2, n);
    for (int64_t r = begin; r < end; ++r) {
      const F* yr = nnvec::load_row(y + r * n, ybuf, n);
      const F* gr = nnvec::load_row(gy + r * n, gbuf, n);
      F* gxr = nnvec::out_row(gx + r * n, xbuf);
      if (p.log) {
        nnvec::log_softmax_bwd(yr, gr, nnvec::sum(gr, n), gxr, n);
      } else {
        nnvec::softmax_bwd(yr, gr, nnvec::dot(yr, gr, n), F(1), gxr, n);
      }
      nnvec::store_row(gxr, gx + r * n, n);
    }
  });
}

// inner > 1: the softmax runs down columns. Each task takes one outer index and a tile of up to
// kTile columns, and sweeps the n rows of that tile (contiguous runs of the tile width) three times.
// This layout (softmax over a non-last dim) is rare in training, so it uses libm's exp.
constexpr int64_t kTile = 256;

// A tile of up to kTile columns of one outer index: column c of row j is element row(j) + c; buf[0..3]
// are per-thread scratch rows of w values.
template <typename F>
struct ColumnTile {
  int64_t base, w, inner;
  F* buf[4];
  int64_t row(int64_t j) const { return base + j * inner; }
};

template <typename F, typename Body>
void for_column_tiles(const SoftmaxParams& p, Body&& body) {
  const int64_t tiles = (p.inner + kTile - 1) / kTile;
  parallel_for(p.outer * tiles, std::max<int64_t>(1, kGrainSize / (p.n * kTile)), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / tiles, c0 = (t % tiles) * kTile;
      const int64_t w = std::min(kTile, p.inner - c0);
      body(ColumnTile<F>{
          o * p.n * p.inner + c0,
          w,
          p.inner,
          {nnvec::scratch<F>(0, w), nnvec::scratch<F>(1, w), nnvec::scratch<F>(2, w), nnvec::scratch<F>(3, w)}});
    }
  });
}

template <typename T, typename U>
void forward_columns(const T* x, U* y, const SoftmaxParams& p) {
  using F = nnvec::opmath2_t<T, U>;
  for_column_tiles<F>(p, [&](const ColumnTile<F>& t) {
    const int64_t w = t.w;
    F *m = t.buf[0], *s = t.buf[1], *buf = t.buf[2], *obuf = t.buf[3];
    for (int64_t c = 0; c < w; ++c) {
      m[c] = -std::numeric_limits<F>::infinity();
      s[c] = 0;
    }
    for (int64_t j = 0; j < p.n; ++j) {
      const F* row = nnvec::load_row(x + t.row(j), buf, w);
      for (int64_t c = 0; c < w; ++c) m[c] = (row[c] > m[c] || row[c] != row[c]) ? row[c] : m[c];
    }
    for (int64_t j = 0; j < p.n; ++j) {
      const F* row = nnvec::load_row(x + t.row(j), buf, w);
      for (int64_t c = 0; c < w; ++c) s[c] += std::exp(row[c] - m[c]);
    }
    for (int64_t c = 0; c < w; ++c) s[c] = p.log ? std::log(s[c]) : F(1) / s[c];
    for (int64_t j = 0; j < p.n; ++j) {
      const F* row = nnvec::load_row(x + t.row(j), buf, w);
      F* out = nnvec::out_row(y + t.row(j), obuf);
      for (int64_t c = 0; c < w; ++c) out[c] = p.log ? (row[c] - m[c]) - s[c] : std::exp(row[c] - m[c]) * s[c];
      nnvec::store_row(out, y + t.row(j), w);
    }
  });
}

template <typename T, typename U>
void backward_columns(const U* gy, const U* y, T* gx, const SoftmaxParams& p) {
  using F = nnvec::opmath2_t<T, U>;
  for_column_tiles<F>(p, [&](const ColumnTile<F>& t) {
    const int64_t w = t.w;
    F *acc = t.buf[0], *ybuf = t.buf[1], *gbuf = t.buf[2], *obuf = t.buf[3];
    for (int64_t c = 0; c < w; ++c) acc[c] = 0;
    // acc = sum_j gy * y (softmax) or sum_j gy (log_softmax), per column.
    for (int64_t j = 0; j < p.n; ++j) {
      const F* gr = nnvec::load_row(gy + t.row(j), gbuf, w);
      if (p.log) {
        for (int64_t c = 0; c < w; ++c) acc[c] += gr[c];
      } else {
        const F* yr = nnvec::load_row(y + t.row(j), ybuf, w);
        for (int64_t c = 0; c < w; ++c) acc[c] += gr[c] * yr[c];
      }
    }
    for (int64_t j = 0; j < p.n; ++j) {
      const F* gr = nnvec::load_row(gy + t.row(j), gbuf, w);
      const F* yr = nnvec::load_row(y + t.row(j), ybuf, w);
      F* out = nnvec::out_row(gx + t.row(j), obuf);
      for (int64_t c = 0; c < w; ++c)
        out[c] = p.log ? gr[c] - std::exp(yr[c]) * acc[c] : yr[c] * (gr[c] - acc[c]);
      nnvec::store_row(out, gx + t.row(j), w);
    }
  });
}

template <typename T>
struct SoftmaxFwd {
  static void run(const Tensor& x, const Tensor& y, const SoftmaxParams& p) {
    dispatch_floating(y.dtype(), "softmax", [&]<typename U>() {
      const T* xp = host_ptr<T>(x);
      U* yp = host_ptr<U>(y);
      if (p.inner == 1) {
        forward_rows(xp, yp, p);
      } else {
        forward_columns(xp, yp, p);
      }
    });
  }
};

template <typename T>
struct SoftmaxBwd {
  static void run(const Tensor& gy, const Tensor& y, const Tensor& gx, const SoftmaxParams& p) {
    dispatch_floating(y.dtype(), "softmax_backward", [&]<typename U>() {
      const U* gp = host_ptr<U>(gy);
      const U* yp = host_ptr<U>(y);
      T* gxp = host_ptr<T>(gx);
      if (p.inner == 1) {
        backward_rows(gp, yp, gxp, p);
      } else {
        backward_columns(gp, yp, gxp, p);
      }
    });
  }
};

}  // namespace

void register_cpu_softmax(const Registry& r) {
  r.floating<SoftmaxFwd>(softmax_fwd);
  r.floating<SoftmaxBwd>(softmax_bwd);
}

}  // namespace mixtrain::kernels
