// CPU layer_norm, forward and backward, fused: one read of x per row forward (mean, biased variance,
// normalise, affine), one read of (x, gy) per row backward (dx, and the dweight/dbias partials).
//
// Accumulation: fp32 (fp64 for fp64 input). 16-bit rows are widened to fp32 once and rounded once on
// store; mean and rstd are saved in fp32. dweight/dbias sum over rows in two fixed stages: rows are
// cut into blocks whose size depends only on the row count, each block sums its rows in order, and
// the block partials are then added in block order. The thread count only decides which thread runs
// a block, so the gradients are bit-identical for any number of threads.
#include <cmath>
#include <vector>

#include "kernels/copy.h"
#include "backends/cpu/kernels/nn_vec.h"
#include "kernels/nn.h"
#include "backends/cpu/kernels/host_ptr.h"
#include "backends/cpu/kernels/register.h"

namespace mixtrain::kernels {


namespace {

// A [cols] parameter (any floating dtype, contiguous) as F values; `fill` when undefined.
template <typename F>
std::vector<F> load_param(const Tensor& t, int64_t cols, F fill) {
  std::vector<F> v(static_cast<size_t>(cols), fill);
  if (!t.defined()) return v;
  dispatch_floating(t.dtype(), "layer_norm", [&]<typename P>() {
    const P* p = host_ptr<P>(t);
    for (int64_t i = 0; i < cols; ++i) v[i] = convert<F>(p[i]);
  });
  return v;
}

// Rounds F values into a [cols] parameter gradient of any floating dtype.
template <typename F>
void store_param(const F* v, const Tensor& t) {
  if (!t.defined()) return;
  dispatch_floating(t.dtype(), "layer_norm_backward", [&]<typename P>() {
    P* p = host_ptr<P>(t);
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = convert<P>(v[i]);
  });
}

template <typename T>
struct LayerNormFwd {
  static void run(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y, const Tensor& mean,
                  const Tensor& rstd, double eps) {
    using F = opmath_t<T>;
    const int64_t rows = mean.numel();
    if (rows == 0) return;
    const int64_t cols = x.numel() / rows;
    const std::vector<F> w = load_param<F>(weight, cols, F(1));
    const std::vector<F> b = load_param<F>(bias, cols, F(0));
    const T* xp = host_ptr<T>(x);
    T* yp = host_ptr<T>(y);
    F* mp = host_ptr<F>(mean);
    F* rp = host_ptr<F>(rstd);
    parallel_for(rows, nnvec::row_grain(cols), [&](int64_t begin, int64_t end) {
      F* xbuf = nnvec::scratch<F>(0, cols);
      F* ybuf = nnvec::scratch<F>(1, cols);
      for (int64_t r = begin; r < end; ++r) {
        const F* xr = nnvec::load_row(xp + r * cols, xbuf, cols);
        const F mu = nnvec::sum(xr, cols) / static_cast<F>(cols);
        const F var = nnvec::sq_dev_sum(xr, mu, cols) / static_cast<F>(cols);
        const F rs = F(1) / std::sqrt(var + static_cast<F>(eps));
        F* yr = nnvec::out_row(yp + r * cols, ybuf);
        nnvec::norm_affine(xr, mu, rs, w.data(), b.data(), yr, cols);
        nnvec::store_row(yr, yp + r * cols, cols);
        mp[r] = mu;
        rp[r] = rs;
      }
    });
  }
};

// At most this many row blocks, so the partial sums stay at 2 * kMaxBlocks * cols values.
constexpr int64_t kMaxBlocks = 64;
constexpr int64_t kMinBlockRows = 8;

template <typename T>
struct LayerNormBwd {
  static void run(const Tensor& gy, const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                  const Tensor& gx, const Tensor& gweight, const Tensor& gbias) {
    using F = opmath_t<T>;
    const int64_t rows = mean.numel();
    if (rows == 0) {  // an empty batch: the parameters get zero gradients
      if (gweight.defined()) fill(gweight, 0.0);
      if (gbias.defined()) fill(gbias, 0.0);
      return;
    }
    const int64_t cols = x.numel() / rows;
    const bool want_params = gweight.defined() || gbias.defined();
    const std::vector<F> w = load_param<F>(weight, cols, F(1));
    // Block size from the row count alone: never from the thread count.
    const int64_t block_rows = std::max(kMinBlockRows, (rows + kMaxBlocks - 1) / kMaxBlocks);
    const int64_t blocks = (rows + block_rows - 1) / block_rows;
    // dw and db partials in one buffer, db's starting 256 bytes past a 4 KiB multiple from dw's:
    // with the two a whole number of pages apart, dw[i] and db[i] share their low 12 address bits,
    // and the CPU holds a db load behind a dw store still in flight to the same page offset
    // (4K aliasing). Measured on the layer_norm kernel benchmark: 3-10% slower forward + backward.
    constexpr int64_t kPage = 4096, kOffset = 256, kSize = static_cast<int64_t>(sizeof(F));
    const int64_t pad = ((kOffset - blocks * cols * kSize) % kPage + kPage) % kPage / kSize;
    std::vector<F> partials;
    if (want_params) partials.assign(static_cast<size_t>(2 * blocks * cols + pad), F(0));
    F* const pw = partials.data();
    F* const pb = want_params ? pw + blocks * cols + pad : nullptr;
    const T* gyp = host_ptr<T>(gy);
    const T* xp = host_ptr<T>(x);
    const F* mp = host_ptr<F>(mean);
    const F* rp = host_ptr<F>(rstd);
    T* gxp = gx.defined() ? host_ptr<T>(gx) : nullptr;
    parallel_for(blocks, 1, [&](int64_t begin, int64_t end) {
      F* xbuf = nnvec::scratch<F>(0, cols);
      F* gbuf = nnvec::scratch<F>(1, cols);
      F* obuf = nnvec::scratch<F>(2, cols);
      for (int64_t blk = begin; blk < end; ++blk) {
        F* dw = want_params ? pw + blk * cols : nullptr;
        F* db = want_params ? pb + blk * cols : nullptr;
        for (int64_t r = blk * block_rows; r < std::min(rows, (blk + 1) * block_rows); ++r) {
          const F* xr = nnvec::load_row(xp + r * cols, xbuf, cols);
          const F* gr = nnvec::load_row(gyp + r * cols, gbuf, cols);
          F* gxr = gxp ? nnvec::out_row(gxp + r * cols, obuf) : obuf;
          nnvec::layer_norm_bwd(xr, gr, w.data(), mp[r], rp[r], gxr, dw, db, cols);
          if (gxp) nnvec::store_row(gxr, gxp + r * cols, cols);
        }
      }
    });
    if (!want_params) return;
    // Second stage: column c adds its block partials in block order.
    parallel_for(cols, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(blocks, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        F sw = 0, sb = 0;
        for (int64_t blk = 0; blk < blocks; ++blk) {
          sw += pw[blk * cols + c];
          sb += pb[blk * cols + c];
        }
        pw[c] = sw;  // block 0's slot is only read by this column, before this write
        pb[c] = sb;
      }
    });
    store_param(pw, gweight);
    store_param(pb, gbias);
  }
};

}  // namespace

void register_cpu_layer_norm(const Registry& r) {
  r.floating<LayerNormFwd>(layer_norm_fwd);
  r.floating<LayerNormBwd>(layer_norm_bwd);
}

}  // namespace mixtrain::kernels
