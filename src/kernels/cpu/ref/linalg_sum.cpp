// The two sums the linalg backward needs, kept local so that linalg does not depend on the reduce
// family: sum_rows (the bias gradient of linear) and sum_to_size (the gradient of a broadcast
// batch dim of matmul). Plain loops.
//
// Accumulation dtype: fp32 for fp32, fp16 and bf16 (opmath_t); fp64 for fp64. Each output element
// is summed by one thread in index order, so results do not depend on the thread count.
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/linalg.h"

namespace mixtrain::kernels {

void sum_rows(const Tensor& x, const Tensor& out) {
  MT_INTERNAL_ASSERT(x.dim() == 2 && out.dim() == 1 && out.size(0) == x.size(1) && out.is_contiguous() &&
                     out.dtype() == x.dtype());
  const int64_t rows = x.size(0), cols = x.size(1), sr = x.stride(0), sc = x.stride(1);
  dispatch_floating(x.dtype(), "sum_rows", [&]<typename T>() {
    using Acc = opmath_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = out.data_ptr<T>();
    // Threads split the columns; each walks all rows over its column range (a contiguous run of
    // each row when sc == 1).
    const int64_t grain = std::max<int64_t>(16, kGrainSize / std::max<int64_t>(rows, 1));
    parallel_for(cols, grain, [&](int64_t c0, int64_t c1) {
      std::vector<Acc> acc(c1 - c0, Acc(0));
      for (int64_t i = 0; i < rows; ++i) {
        const T* row = px + i * sr;
        for (int64_t j = c0; j < c1; ++j) acc[j - c0] += load(row[j * sc]);
      }
      for (int64_t j = c0; j < c1; ++j) po[j] = store<T>(acc[j - c0]);
    });
  });
}

void sum_to_size(const Tensor& x, const Tensor& out) {
  MT_INTERNAL_ASSERT(x.dim() == out.dim() && out.is_contiguous() && out.dtype() == x.dtype());
  const int r = x.dim();
  Shape out_st = out.strides();
  for (int d = 0; d < r; ++d) {
    MT_INTERNAL_ASSERT(out.size(d) == x.size(d) || out.size(d) == 1);
    if (out.size(d) != x.size(d)) out_st[d] = 0;  // summed dim
  }
  dispatch_floating(x.dtype(), "sum_to_size", [&]<typename T>() {
    using Acc = opmath_t<T>;
    std::vector<Acc> acc(out.numel(), Acc(0));
    const T* px = static_cast<const T*>(x.raw_data());
    const int64_t n = x.numel();
    // Odometer over x in row-major order (the order every output element sees its terms in).
    int64_t idx[kMaxDims] = {};
    int64_t xo = 0, oo = 0;
    for (int64_t i = 0; i < n; ++i) {
      acc[oo] += load(px[xo]);
      for (int d = r - 1; d >= 0; --d) {
        if (++idx[d] < x.size(d)) {
          xo += x.stride(d);
          oo += out_st[d];
          break;
        }
        xo -= x.stride(d) * (x.size(d) - 1);
        oo -= out_st[d] * (x.size(d) - 1);
        idx[d] = 0;
      }
    }
    T* po = out.data_ptr<T>();
    for (int64_t i = 0; i < out.numel(); ++i) po[i] = store<T>(acc[i]);
  });
}

}  // namespace mixtrain::kernels
