// The two sums the linalg backward needs, kept local so that linalg does not depend on the reduce
// family: sum_rows (the bias gradient of linear) and sum_to_size (the gradient of a broadcast
// batch dim of matmul). sum_rows sums in the blocked row order of linalg.h, with vectorised rows
// where the column stride is 1 and plain loops otherwise.
//
// Accumulation dtype: fp32 for fp32, fp16 and bf16 (opmath_t); fp64 for fp64. Neither sum's order
// depends on the thread count.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels/loops.h"
#include "backends/cpu/kernels/nn_vec.h"
#include "kernels/linalg.h"
#include "backends/cpu/kernels/host_ptr.h"
#include "backends/cpu/kernels/register.h"

namespace mixtrain::kernels {

namespace {

void round_into(const float* acc, const Tensor& out, int64_t c0, int64_t n) {
  switch (out.dtype()) {
    case kFloat32: std::memcpy(host_ptr<float>(out) + c0, acc, static_cast<size_t>(n) * sizeof(float)); return;
    case kFloat16: convert_fp32_to_fp16(acc, host_ptr<float16>(out) + c0, n); return;
    case kBFloat16: convert_fp32_to_bf16(acc, host_ptr<bfloat16>(out) + c0, n); return;
    default: MT_INTERNAL_ASSERT(false, "sum_rows: unexpected output ", describe(out));
  }
}

// Columns the final pass adds up at once (1 KiB of fp32 accumulators), and the width of the
// widened 16-bit row segments.
constexpr int64_t kColumnBlock = 256;

// 16-bit rows are widened this many at a time (one converter call per group, not per row), in
// segments of kColumnBlock columns: 16 KiB of fp32.
constexpr int64_t kWidenRows = 16;

// acc[0, n) += rows [i0, i1) of x (of x's dtype, rows sr apart, columns sc apart), in the
// accumulation type and in row order. 16-bit rows of unit column stride are widened into `buf`
// (kWidenRows x kColumnBlock floats) first.
template <typename T, typename Acc>
void add_rows(const T* px, int64_t sr, int64_t sc, int64_t i0, int64_t i1, int64_t n, Acc* acc, float* buf) {
  if constexpr (std::is_same_v<T, Acc>) {
    if (sc == 1) {
      for (int64_t i = i0; i < i1; ++i) {
        const T* row = px + i * sr;
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) acc[j] += row[j];
      }
      return;
    }
  } else if constexpr (std::is_same_v<Acc, float>) {
    if (sc == 1) {  // kColumnBlock columns at a time, so that the widened rows stay in L1
      for (int64_t c = 0; c < n; c += kColumnBlock) {
        const int64_t w = std::min(kColumnBlock, n - c);
        for (int64_t g = i0; g < i1; g += kWidenRows) {
          const int64_t rows = std::min(kWidenRows, i1 - g);
          nnvec::load_rows(px + g * sr + c, sr, rows, w, buf);
          for (int64_t r = 0; r < rows; ++r) {
            const float* v = buf + r * w;
#pragma omp simd
            for (int64_t j = 0; j < w; ++j) acc[c + j] += v[j];
          }
        }
      }
      return;
    }
  }
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = 0; j < n; ++j) acc[j] += load(px[i * sr + j * sc]);
}

// The blocked row order (see linalg.h): one partial sum per block of rows, each summed over its
// rows in order from zero; threads take contiguous runs of blocks, so a thread reads the rows that
// the same thread of a row-split producer (every elementwise kernel) wrote. The partials are then
// added in block order from zero, the columns split between the threads.
template <typename T>
void sum_rows_blocked(const Tensor& x, const Tensor& out) {
  using Acc = opmath_t<T>;
  const int64_t rows = x.size(0), cols = x.size(1), sr = x.stride(0), sc = x.stride(1);
  const int64_t block = sum_rows_block(rows), nblocks = std::max<int64_t>(1, (rows + block - 1) / block);
  const T* px = static_cast<const T*>(host_data(x));
  Tensor partial_t = Tensor::empty({nblocks, cols}, dtype_v<Acc>, x.device());
  Acc* partial = host_ptr<Acc>(partial_t);
  const int64_t block_grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(block * cols, 1));
  parallel_for(nblocks, block_grain, [&](int64_t b0, int64_t b1) {
    float* buf = std::is_same_v<T, Acc> ? nullptr : nnvec::scratch<float>(0, kWidenRows * kColumnBlock);
    for (int64_t b = b0; b < b1; ++b) {
      Acc* acc = partial + b * cols;
      std::fill(acc, acc + cols, Acc(0));
      add_rows(px, sr, sc, b * block, std::min(rows, (b + 1) * block), cols, acc, buf);
    }
  });
  const int64_t column_grain = std::max<int64_t>(16, kGrainSize / std::max<int64_t>(nblocks, 1));
  parallel_for(cols, column_grain, [&](int64_t c0, int64_t c1) {
    alignas(64) Acc acc[kColumnBlock];
    for (int64_t c = c0; c < c1; c += kColumnBlock) {
      const int64_t n = std::min(kColumnBlock, c1 - c);
      std::fill(acc, acc + n, Acc(0));
      for (int64_t b = 0; b < nblocks; ++b) {
        const Acc* p = partial + b * cols + c;
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) acc[j] += p[j];
      }
      if constexpr (std::is_same_v<Acc, float>) {
        round_into(acc, out, c, n);
      } else {
        T* po = host_ptr<T>(out);
        for (int64_t j = 0; j < n; ++j) po[c + j] = store<T>(acc[j]);
      }
    }
  });
}

}  // namespace

void sum_rows_cpu(const Tensor& x, const Tensor& out) {
  MT_INTERNAL_ASSERT(
      x.dim() == 2 && out.dim() == 1 && out.size(0) == x.size(1) && out.is_contiguous() &&
      (out.dtype() == x.dtype() || (x.dtype() == kFloat32 && (out.dtype() == kFloat16 || out.dtype() == kBFloat16))));
  if (x.size(1) == 0) return;
  dispatch_floating(x.dtype(), "sum_rows", [&]<typename T>() { sum_rows_blocked<T>(x, out); });
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
