// The two sums the linalg backward needs, kept local so that linalg does not depend on the reduce
// family: sum_rows (the bias gradient of linear) and sum_to_size (the gradient of a broadcast
// batch dim of matmul). sum_rows over rows of unit column stride is a vectorised column-block
// pass; the other layouts use plain loops.
//
// Accumulation dtype: fp32 for fp32, fp16 and bf16 (opmath_t); fp64 for fp64. Each output element
// is summed by one thread in index order, so results do not depend on the thread count.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/nn_vec.h"
#include "kernels/linalg.h"
#include "kernels/cpu/host_ptr.h"
#include "kernels/cpu/register.h"

namespace mixtrain::kernels {

namespace {

// Columns one pass over the rows accumulates at once: 256 fp32 accumulators (1 KiB) and a widened
// block of row segments stay in L1 while the rows stream through.
constexpr int64_t kColumnBlock = 256;
// 16-bit rows are widened kRowBlock at a time (one converter dispatch per block, not per row):
// 16 x 256 floats, 16 KiB.
constexpr int64_t kRowBlock = 16;
// Threads split the columns in multiples of a 64-byte line of fp32 accumulators, so that a
// gradient of 256 columns (a 256-wide layer) still keeps two threads busy.
constexpr int64_t kColumnAlign = 16;

void round_into(const float* acc, const Tensor& out, int64_t c0, int64_t n) {
  switch (out.dtype()) {
    case kFloat32: std::memcpy(host_ptr<float>(out) + c0, acc, static_cast<size_t>(n) * sizeof(float)); return;
    case kFloat16: convert_fp32_to_fp16(acc, host_ptr<float16>(out) + c0, n); return;
    case kBFloat16: convert_fp32_to_bf16(acc, host_ptr<bfloat16>(out) + c0, n); return;
    default: MT_INTERNAL_ASSERT(false, "sum_rows: unexpected output ", describe(out));
  }
}

// Rows with unit column stride (the gradient of a linear layer): each thread owns a range of
// columns and streams every row's segment of it into fp32 accumulators, a vectorised add per row
// (16-bit rows widened a block of rows at a time). Every column is summed over the rows in order,
// so neither the column split nor the row blocks change a bit.
template <typename T>
void sum_rows_unit_stride(const Tensor& x, const Tensor& out) {
  const int64_t rows = x.size(0), cols = x.size(1), sr = x.stride(0);
  const T* px = static_cast<const T*>(host_data(x));
  const int64_t aligned_cols = (cols + kColumnAlign - 1) / kColumnAlign;  // units of kColumnAlign
  const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(rows * kColumnAlign, 1));
  parallel_for(aligned_cols, grain, [&](int64_t u0, int64_t u1) {
    const int64_t c0 = u0 * kColumnAlign, c1 = std::min(cols, u1 * kColumnAlign);
    alignas(64) float acc[kColumnBlock];
    alignas(64) float buf[kRowBlock * kColumnBlock];
    for (int64_t b = c0; b < c1; b += kColumnBlock) {
      const int64_t n = std::min(kColumnBlock, c1 - b);
      std::fill(acc, acc + n, 0.0f);
      for (int64_t i0 = 0; i0 < rows; i0 += kRowBlock) {
        const int64_t block = std::min(kRowBlock, rows - i0);
        const float* v;  // the block's first row; the next ones `step` floats apart
        int64_t step;
        if constexpr (std::is_same_v<T, float>) {
          v = px + i0 * sr + b;
          step = sr;
        } else {
          nnvec::load_rows(px + i0 * sr + b, sr, block, n, buf);
          v = buf;
          step = n;
        }
        for (int64_t i = 0; i < block; ++i, v += step)
          for (int64_t j = 0; j < n; ++j) acc[j] += v[j];
      }
      round_into(acc, out, b, n);
    }
  });
}

}  // namespace

void sum_rows_cpu(const Tensor& x, const Tensor& out) {
  MT_INTERNAL_ASSERT(
      x.dim() == 2 && out.dim() == 1 && out.size(0) == x.size(1) && out.is_contiguous() &&
      (out.dtype() == x.dtype() || (x.dtype() == kFloat32 && (out.dtype() == kFloat16 || out.dtype() == kBFloat16))));
  const int64_t rows = x.size(0), cols = x.size(1), sr = x.stride(0), sc = x.stride(1);
  if (sc == 1 || cols == 1) {
    switch (x.dtype()) {
      case kFloat32: sum_rows_unit_stride<float>(x, out); return;
      case kFloat16: sum_rows_unit_stride<float16>(x, out); return;
      case kBFloat16: sum_rows_unit_stride<bfloat16>(x, out); return;
      default: break;
    }
  }
  dispatch_floating(x.dtype(), "sum_rows", [&]<typename T>() {
    using Acc = opmath_t<T>;
    const T* px = static_cast<const T*>(host_data(x));
    // Threads split the columns; each walks all rows over its column range.
    const int64_t grain = std::max<int64_t>(16, kGrainSize / std::max<int64_t>(rows, 1));
    parallel_for(cols, grain, [&](int64_t c0, int64_t c1) {
      std::vector<Acc> acc(c1 - c0, Acc(0));
      for (int64_t i = 0; i < rows; ++i) {
        const T* row = px + i * sr;
        for (int64_t j = c0; j < c1; ++j) acc[j - c0] += load(row[j * sc]);
      }
      if constexpr (std::is_same_v<T, float>) {
        round_into(acc.data(), out, c0, c1 - c0);
      } else {
        T* po = host_ptr<T>(out);
        for (int64_t j = c0; j < c1; ++j) po[j] = store<T>(acc[j - c0]);
      }
    });
  });
}

void sum_to_size_cpu(const Tensor& x, const Tensor& out) {
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
    const T* px = static_cast<const T*>(host_data(x));
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
    T* po = host_ptr<T>(out);
    for (int64_t i = 0; i < out.numel(); ++i) po[i] = store<T>(acc[i]);
  });
}

void register_cpu_linalg_sum(const Registry& r) {
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    r.set(sum_rows_table, d, &sum_rows_cpu);
    r.set(sum_to_size_table, d, &sum_to_size_cpu);
  }
}

}  // namespace mixtrain::kernels
