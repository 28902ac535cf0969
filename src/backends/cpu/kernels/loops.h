// CPU loop helpers shared by every elementwise-style kernel.
//
// dispatch_floating / dispatch_all turn a runtime DType into a template argument (the one switch
// in the project that fans out dtypes). cpu_kernel runs a functor over N same-shaped operands
// with arbitrary strides (broadcast inputs arrive as stride-0 expand views), computing in the
// opmath type (fp32 for 16-bit storage, fp64 for fp64) and rounding once on store. The contiguous
// case is a flat loop the compiler vectorises; the strided case walks coalesced dimensions.
// Work is split across OpenMP threads by linear index ranges, so results do not depend on the
// thread count.
#pragma once

#include <omp.h>

#include <array>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "mixtrain/dtype.h"
#include "mixtrain/error.h"
#include "mixtrain/tensor.h"
#include "backends/cpu/kernels/host_ptr.h"
#include "kernels/dtype_dispatch.h"
#include "kernels/convert.h"

namespace mixtrain::kernels {

// Minimum number of elements per thread before a loop is split across threads.
inline constexpr int64_t kGrainSize = 32768;

// Runs body(begin, end) over [0, n) split into contiguous ranges, one per thread, when n is large.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& body) {
  if (n <= grain || omp_get_max_threads() == 1 || omp_in_parallel()) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
  int64_t max_chunks = (n + grain - 1) / grain;
#pragma omp parallel
  {
    int64_t nt = std::min<int64_t>(omp_get_num_threads(), max_chunks);
    int64_t tid = omp_get_thread_num();
    if (tid < nt) {
      int64_t chunk = (n + nt - 1) / nt;
      int64_t b = tid * chunk, e = std::min(n, b + chunk);
      if (b < e) body(b, e);
    }
  }
}

// Shape and per-operand strides after merging dimensions that are contiguous for every operand.
template <int N>
struct StridedLayout {
  int ndim = 0;
  int64_t shape[kMaxDims];
  int64_t strides[N][kMaxDims];

  StridedLayout(const Shape& s, const std::array<const Shape*, N>& st) {
    // Drop size-1 dims, then merge neighbours i, i+1 when stride[i] == stride[i+1] * shape[i+1].
    for (int d = 0; d < s.size(); ++d) {
      if (s[d] == 1) continue;
      if (ndim > 0) {
        bool mergeable = true;
        for (int k = 0; k < N; ++k)
          if ((*st[k])[d] * s[d] != strides[k][ndim - 1]) mergeable = false;
        if (mergeable) {
          shape[ndim - 1] *= s[d];
          for (int k = 0; k < N; ++k) strides[k][ndim - 1] = (*st[k])[d];
          continue;
        }
      }
      shape[ndim] = s[d];
      for (int k = 0; k < N; ++k) strides[k][ndim] = (*st[k])[d];
      ++ndim;
    }
    if (ndim == 0) {  // a scalar or all-ones shape: one element
      ndim = 1;
      shape[0] = 1;
      for (int k = 0; k < N; ++k) strides[k][0] = 1;
    }
  }
};

// Calls inner(offsets, count, inner_strides) for runs along the innermost dimension covering the
// linear index range [begin, end) of `layout`; offsets are element offsets per operand.
template <int N, typename Inner>
void strided_ranges(const StridedLayout<N>& L, int64_t begin, int64_t end, Inner&& inner) {
  const int last = L.ndim - 1;
  int64_t idx[kMaxDims];
  int64_t rem = begin;
  for (int d = last; d >= 0; --d) {
    idx[d] = rem % L.shape[d];
    rem /= L.shape[d];
  }
  std::array<int64_t, N> off{};
  for (int k = 0; k < N; ++k)
    for (int d = 0; d <= last; ++d) off[k] += idx[d] * L.strides[k][d];
  std::array<int64_t, N> inner_stride;
  for (int k = 0; k < N; ++k) inner_stride[k] = L.strides[k][last];

  int64_t pos = begin;
  while (pos < end) {
    int64_t count = std::min(L.shape[last] - idx[last], end - pos);
    inner(off, count, inner_stride);
    pos += count;
    // Advance the multi-index by `count` along the last dim, carrying into outer dims.
    for (int k = 0; k < N; ++k) off[k] += count * inner_stride[k];
    idx[last] += count;
    for (int d = last; d > 0 && idx[d] == L.shape[d]; --d) {
      for (int k = 0; k < N; ++k) off[k] -= L.shape[d] * L.strides[k][d];
      idx[d] = 0;
      ++idx[d - 1];
      for (int k = 0; k < N; ++k) off[k] += L.strides[k][d - 1];
    }
  }
}

// One `const Tensor&` per element type in a pack.
template <typename>
using TensorFor = const Tensor&;

// out[i] = f(in_0[i], ..., in_{M-1}[i]) over same-shaped operands. `f` takes and returns values in
// the compute type the caller chose (usually opmath_t); loads and stores convert.
// Element types: Out for the output, Ins... for the inputs.
template <typename Compute, typename Out, typename... Ins, typename F>
void cpu_kernel(const Tensor& out, F&& f, TensorFor<Ins>... ins) {
  constexpr int N = 1 + sizeof...(Ins);
  static_assert(sizeof...(ins) == sizeof...(Ins));
  Out* out_ptr = static_cast<Out*>(host_data(out));
  std::tuple<const Ins*...> in_ptrs{static_cast<const Ins*>(host_data(ins))...};
  const int64_t n = out.numel();

  bool all_contiguous = out.is_contiguous() && (ins.is_contiguous() && ...);
  if (all_contiguous) {
    parallel_for(n, kGrainSize, [&](int64_t b, int64_t e) {
      std::apply(
          [&](const Ins*... p) {
            for (int64_t i = b; i < e; ++i) out_ptr[i] = convert<Out>(f(convert<Compute>(p[i])...));
          },
          in_ptrs);
    });
    return;
  }
  std::array<const Shape*, N> strides{&out.strides(), &ins.strides()...};
  StridedLayout<N> layout(out.shape(), strides);
  parallel_for(n, kGrainSize, [&](int64_t b, int64_t e) {
    strided_ranges<N>(layout, b, e, [&](const std::array<int64_t, N>& off, int64_t count, const std::array<int64_t, N>& st) {
      [&]<size_t... I>(std::index_sequence<I...>) {
        Out* o = out_ptr + off[0];
        const int64_t so = st[0];
        [[maybe_unused]] auto ptrs = std::make_tuple((std::get<I>(in_ptrs) + off[I + 1])...);
        for (int64_t i = 0; i < count; ++i)
          o[i * so] = convert<Out>(f(convert<Compute>(std::get<I>(ptrs)[i * st[I + 1]])...));
      }(std::index_sequence_for<Ins...>{});
    });
  });
}

}  // namespace mixtrain::kernels
