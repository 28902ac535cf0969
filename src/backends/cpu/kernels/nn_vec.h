// Row primitives shared by the nn and loss CPU kernels (softmax, log_softmax, cross_entropy,
// layer_norm, the attention softmax).
//
// Accumulation: fp32 for fp32 rows (and so for 16-bit rows, which the kernels widen to fp32 first),
// fp64 for fp64 rows. Each primitive works on contiguous opmath rows; the float versions are built
// for AVX-512, AVX2+FMA and baseline x86-64 and picked per call from cpu::isa() (mixtrain/cpu.h),
// so the library still runs on any x86-64 while using the widest vectors the CPU (under the ISA
// cap) has. The fp64 versions
// exist for gradient checks and use the libm functions.
//
// Reductions inside one row use a fixed vector order (the compiler's for that ISA), so a result
// may depend on the CPU's ISA level but never on the thread count: rows never span two threads.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/prefetch.h"
#include "backends/cpu/kernels/loops.h"
#include "mixtrain/half.h"

namespace mixtrain::kernels::nnvec {

// max over x[0, n); NaN when any element is NaN (-inf for n == 0).
float max(const float* x, int64_t n);
double max(const double* x, int64_t n);
float sum(const float* x, int64_t n);
double sum(const double* x, int64_t n);
float dot(const float* a, const float* b, int64_t n);
double dot(const double* a, const double* b, int64_t n);
// sum_i exp(x[i] - shift); with `out`, also out[i] = exp(x[i] - shift) (out may equal x).
float exp_sum(const float* x, float shift, float* out, int64_t n);
double exp_sum(const double* x, double shift, double* out, int64_t n);
// out[i] = a * x[i] + b (out may equal x).
void affine(const float* x, float a, float b, float* out, int64_t n);
void affine(const double* x, double a, double b, double* out, int64_t n);
// out[i] = (x[i] - a) - b: log_softmax's (x - max) - log(sum), subtracted in that order so that a
// large max does not cost the small result its precision (out may equal x).
void sub2(const float* x, float a, float b, float* out, int64_t n);
void sub2(const double* x, double a, double b, double* out, int64_t n);
// out[i] = (exp((x[i] - a) - b) - sub) * mul: the cross-entropy gradient row (a = max, b = log-sum).
void exp_affine(const float* x, float a, float b, float sub, float mul, float* out, int64_t n);
void exp_affine(const double* x, double a, double b, double sub, double mul, double* out, int64_t n);
// Softmax backward: gx[i] = scale * y[i] * (gy[i] - dot).
void softmax_bwd(const float* y, const float* gy, float dot, float scale, float* gx, int64_t n);
void softmax_bwd(const double* y, const double* gy, double dot, double scale, double* gx, int64_t n);
// log_softmax backward: gx[i] = gy[i] - exp(y[i]) * gsum.
void log_softmax_bwd(const float* y, const float* gy, float gsum, float* gx, int64_t n);
void log_softmax_bwd(const double* y, const double* gy, double gsum, double* gx, int64_t n);
// sum_i (x[i] - mean)^2.
float sq_dev_sum(const float* x, float mean, int64_t n);
double sq_dev_sum(const double* x, double mean, int64_t n);
// out[i] = (x[i] - mean) * rstd * w[i] + b[i].
void norm_affine(const float* x, float mean, float rstd, const float* w, const float* b, float* out, int64_t n);
void norm_affine(const double* x, double mean, double rstd, const double* w, const double* b, double* out, int64_t n);
// layer_norm backward of one row: gx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = gy * w,
// xhat = (x - mean) * rstd; when dw and db are non-null (both or neither) also dw += gy * xhat and
// db += gy.
void layer_norm_bwd(const float* x, const float* gy, const float* w, float mean, float rstd, float* gx, float* dw,
                    float* db, int64_t n);
void layer_norm_bwd(const double* x, const double* gy, const double* w, double mean, double rstd, double* gx,
                    double* dw, double* db, int64_t n);

// ---- Moving rows between storage and opmath.

// The opmath type for a kernel that reads T and writes U: fp64 if either is fp64, else fp32.
template <typename T, typename U = T>
using opmath2_t = std::conditional_t<std::is_same_v<T, double> || std::is_same_v<U, double>, double, float>;

// A per-thread scratch row of F with room for n values; `slot` tells apart buffers used together.
template <typename F>
F* scratch(int slot, int64_t n) {
  thread_local std::vector<F> bufs[4];
  auto& b = bufs[slot];
  if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  return b.data();
}

// The row src[0, n) as F: src itself when T is F, else widened into buf (exactly).
template <typename F, typename T>
const F* load_row(const T* src, F* buf, int64_t n) {
  if constexpr (std::is_same_v<T, F>) {
    return src;
  } else {
    if constexpr (std::is_same_v<F, float> && std::is_same_v<T, bfloat16>) {
      convert_bf16_to_fp32(src, buf, n);
    } else if constexpr (std::is_same_v<F, float> && std::is_same_v<T, float16>) {
      convert_fp16_to_fp32(src, buf, n);
    } else {
      for (int64_t i = 0; i < n; ++i) buf[i] = convert<F>(src[i]);
    }
    return buf;
  }
}

// Where a kernel writes an F row destined for dst: dst itself when U is F, else buf (then store_row).
template <typename F, typename U>
F* out_row(U* dst, F* buf) {
  if constexpr (std::is_same_v<U, F>) {
    return dst;
  } else {
    return buf;
  }
}

// Rounds the F row `row` into dst (a no-op when out_row returned dst itself).
template <typename F, typename U>
void store_row(const F* row, U* dst, int64_t n) {
  if constexpr (!std::is_same_v<U, F>) {
    if constexpr (std::is_same_v<F, float> && std::is_same_v<U, bfloat16>) {
      convert_fp32_to_bf16(row, dst, n);
    } else if constexpr (std::is_same_v<F, float> && std::is_same_v<U, float16>) {
      convert_fp32_to_fp16(row, dst, n);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = convert<U>(row[i]);
    }
  }
}

// `rows` rows of n elements, row r at src + r * st, as F into dst [rows, n] (contiguous), exactly.
// Strided rows are prefetched ahead (core/prefetch.h) and converted with one dispatch per call.
template <typename F, typename T>
void load_rows(const T* src, int64_t st, int64_t rows, int64_t n, F* dst) {
  if constexpr (std::is_same_v<F, float> && std::is_same_v<T, bfloat16>) {
    convert_bf16_to_fp32_rows(src, st, dst, n, rows, n);
  } else if constexpr (std::is_same_v<F, float> && std::is_same_v<T, float16>) {
    convert_fp16_to_fp32_rows(src, st, dst, n, rows, n);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      detail::prefetch_row_ahead(src, st, r, rows, n);
      for (int64_t i = 0; i < n; ++i) dst[r * n + i] = convert<F>(src[r * st + i]);
    }
  }
}

// The F rows src [rows, n] (contiguous) rounded once into dst's rows, dst_st apart.
template <typename F, typename U>
void store_rows(const F* src, int64_t rows, int64_t n, U* dst, int64_t dst_st) {
  if constexpr (std::is_same_v<F, float> && std::is_same_v<U, bfloat16>) {
    convert_fp32_to_bf16_rows(src, n, dst, dst_st, rows, n);
  } else if constexpr (std::is_same_v<F, float> && std::is_same_v<U, float16>) {
    convert_fp32_to_fp16_rows(src, n, dst, dst_st, rows, n);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < n; ++i) dst[r * dst_st + i] = convert<U>(src[r * n + i]);
  }
}

// Rows per parallel task so that one task touches at least ~kGrainSize elements.
inline int64_t row_grain(int64_t row_len) { return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(row_len, 1)); }

// Elements per block of a fixed-order reduction (see block_sums).
inline constexpr int64_t kReduceBlock = 4096;

// Sums partial(begin, end) over the blocks [b * kReduceBlock, ...) of [0, n), blocks in parallel,
// then the block results in block order: the same value for any thread count.
template <typename F, typename Partial>
F block_sums(int64_t n, Partial&& partial) {
  const int64_t blocks = (n + kReduceBlock - 1) / kReduceBlock;
  std::vector<F> part(static_cast<size_t>(blocks));
  parallel_for(blocks, kGrainSize / kReduceBlock, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) part[b] = partial(b * kReduceBlock, std::min(n, (b + 1) * kReduceBlock));
  });
  F s = 0;
  for (F v : part) s += v;
  return s;
}

}  // namespace mixtrain::kernels::nnvec
