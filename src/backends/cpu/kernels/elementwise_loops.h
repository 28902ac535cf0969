// The blocked map loop behind every arithmetic elementwise CPU kernel (internal to
// src/backends/cpu/kernels/elementwise*.cpp).
//
// Accumulation/compute dtype: opmath_t<T> (fp32 for fp32, fp16 and bf16 storage; fp64 for fp64).
//
// map<T>(f, out, ins...) walks the operands in blocks of kBlock elements: each input block is
// loaded into an opmath buffer (16-bit rows through the SIMD converters of half.h, fp32/fp64 rows
// read in place, stride-0 broadcasts filled once), f runs over the block as a plain loop over
// contiguous arrays, which the compiler vectorises, and the result block is rounded once on store.
// That keeps the per-op code a scalar functor while every dtype, stride pattern and ISA shares one
// loop. The compute loop is compiled three times (generic x86-64, AVX2+FMA, AVX-512) and picked at
// run time from cpu::isa() (mixtrain/cpu.h: the CPU's level under the ISA cap).
//
// Thread-count independence: contiguous operands are split into blocks at fixed positions, so an
// element's result never depends on how the blocks are spread over threads; strided operands are
// split by linear index ranges and every element goes through the same per-lane arithmetic.
//
// Files that include this header start with
//   #pragma GCC optimize("no-math-errno", "no-trapping-math")
// before any include. Neither flag changes a result: they only let GCC if-convert the selects
// (clamps, relu, NaN handling) and vectorise sqrt, which strict trapping semantics forbid.
#pragma once

#include "core/isa_target.h"
#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "backends/cpu/kernels/loops.h"
#include "kernels/elementwise.h"
#include "mixtrain/cpu.h"
#include "mixtrain/half.h"
#include "backends/cpu/kernels/host_ptr.h"

namespace mixtrain::kernels::ew {

// 256 elements: four operand buffers of fp64 stay within 8 KiB, well inside L1.
inline constexpr int64_t kBlock = 256;

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

// Returns `n` values of src (element stride `stride`, 0 = broadcast) as opmath values: a pointer
// into src itself when no conversion or gather is needed, else `buf` filled.
template <typename T, typename C = opmath_t<T>>
inline const C* load_run(const T* src, int64_t stride, int64_t n, C* buf) {
  if constexpr (std::is_same_v<T, C>) {
    if (stride == 1) return src;
  }
  if (stride == 0) {
    std::fill_n(buf, n, static_cast<C>(src[0]));
    return buf;
  }
  if (stride == 1) {
    if constexpr (std::is_same_v<T, float16> && std::is_same_v<C, float>) {
      convert_fp16_to_fp32(src, buf, n);
      return buf;
    } else if constexpr (std::is_same_v<T, bfloat16> && std::is_same_v<C, float>) {
      convert_bf16_to_fp32(src, buf, n);
      return buf;
    }
  }
  for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<C>(src[i * stride]);
  return buf;
}

// Rounds `n` opmath values into dst (element stride `stride`), once each.
template <typename T, typename C>
inline void store_run(T* dst, int64_t stride, int64_t n, const C* buf) {
  if (stride == 1) {
    if constexpr (std::is_same_v<T, float16> && std::is_same_v<C, float>) {
      return convert_fp32_to_fp16(buf, dst, n);
    } else if constexpr (std::is_same_v<T, bfloat16> && std::is_same_v<C, float>) {
      return convert_fp32_to_bf16(buf, dst, n);
    }
  }
  for (int64_t i = 0; i < n; ++i) dst[i * stride] = static_cast<T>(buf[i]);
}

// The compute loop, one copy per ISA. `res` is a local buffer, so the compiler knows it aliases
// no input and vectorises without run-time overlap checks.
// The two-output form takes an f that returns a pair and stores its halves in two buffers.
#define MT_EW_DEFINE_APPLY(NAME, ATTR)                                                                 \
  template <typename F, typename C, typename... P>                                                     \
  ATTR void NAME(const F& f, C* __restrict res, int64_t n, const P*... in) {                           \
    for (int64_t i = 0; i < n; ++i) res[i] = f(in[i]...);                                              \
  }                                                                                                    \
  template <typename F, typename C, typename... P>                                                     \
  ATTR void NAME##2(const F& f, C* __restrict res0, C* __restrict res1, int64_t n, const P*... in) { \
    for (int64_t i = 0; i < n; ++i) {                                                                  \
      const auto r = f(in[i]...);                                                                      \
      res0[i] = r.first;                                                                               \
      res1[i] = r.second;                                                                              \
    }                                                                                                  \
  }
MT_EW_DEFINE_APPLY(apply_generic, )
#if MT_X86_TARGETS
MT_EW_DEFINE_APPLY(apply_avx2, MT_TARGET_AVX2)
MT_EW_DEFINE_APPLY(apply_avx512, MT_TARGET_AVX512_WIDE)
#endif
#undef MT_EW_DEFINE_APPLY

template <typename F, typename C, typename... P>
inline void apply(cpu::Isa isa, const F& f, C* res, int64_t n, const P*... in) {
#if MT_X86_TARGETS
  if (isa >= cpu::Isa::kAvx512) return apply_avx512(f, res, n, in...);
  if (isa >= cpu::Isa::kAvx2) return apply_avx2(f, res, n, in...);
#endif
  apply_generic(f, res, n, in...);
}

template <typename F, typename C, typename... P>
inline void apply2(cpu::Isa isa, const F& f, C* res0, C* res1, int64_t n, const P*... in) {
#if MT_X86_TARGETS
  if (isa >= cpu::Isa::kAvx512) return apply_avx5122(f, res0, res1, n, in...);
  if (isa >= cpu::Isa::kAvx2) return apply_avx22(f, res0, res1, n, in...);
#endif
  apply_generic2(f, res0, res1, n, in...);
}

// out = f(ins...) elementwise; out and every input have storage type T and the same shape (any
// strides). f takes and returns opmath_t<T>.
template <typename T, typename F, typename... Ins>
void map(const F& f, const Tensor& out, const Ins&... ins) {
  static_assert(sizeof...(Ins) >= 1 && (std::is_same_v<Ins, Tensor> && ...));
  using C = opmath_t<T>;
  constexpr int M = sizeof...(Ins);
  constexpr int N = M + 1;
  const int64_t n = out.numel();
  if (n == 0) return;
  T* const o = static_cast<T*>(host_data(out));
  const std::array<const T*, M> p{static_cast<const T*>(host_data(ins))...};
  const cpu::Isa isa = cpu::isa();

  // One run of `len` elements: out at dst (stride ds), inputs at src[k] (stride st[k]).
  auto run = [&](T* dst, int64_t ds, const std::array<const T*, M>& src, const std::array<int64_t, M>& st,
                 int64_t len) {
    alignas(64) C res[kBlock];
    alignas(64) C buf[M][kBlock];
    for (int64_t s = 0; s < len; s += kBlock) {
      const int64_t m = std::min(kBlock, len - s);
      [&]<size_t... I>(std::index_sequence<I...>) {
        apply(isa, f, res, m, load_run<T>(src[I] + s * st[I], st[I], m, buf[I])...);
      }
      (std::make_index_sequence<M>{});
      store_run(dst + s * ds, ds, m, res);
    }
  };

  if (out.is_contiguous() && (ins.is_contiguous() && ...)) {
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    std::array<int64_t, M> ones;
    ones.fill(1);
    parallel_for(blocks, kGrainSize / kBlock, [&](int64_t b, int64_t e) {
      const int64_t s = b * kBlock, len = std::min(n, e * kBlock) - s;
      std::array<const T*, M> src;
      for (int k = 0; k < M; ++k) src[k] = p[k] + s;
      run(o + s, 1, src, ones, len);
    });
    return;
  }
  StridedLayout<N> layout(out.shape(), {&out.strides(), &ins.strides()...});
  parallel_for(n, kGrainSize, [&](int64_t b, int64_t e) {
    strided_ranges<N>(layout, b, e,
                      [&](const std::array<int64_t, N>& off, int64_t count, const std::array<int64_t, N>& st) {
                        std::array<const T*, M> src;
                        std::array<int64_t, M> sst;
                        for (int k = 0; k < M; ++k) {
                          src[k] = p[k] + off[k + 1];
                          sst[k] = st[k + 1];
                        }
                        run(o + off[0], st[0], src, sst, count);
                      });
  });
}

// {out0, out1} = f(ins...) elementwise, f returning a std::pair of opmath_t<T> values: two results
// of one pass that share their work. Every operand contiguous, storage type T, one shape; an output
// may be one of the inputs (a block is read whole before it is written). The same fixed blocks as
// map, so no result depends on the thread count.
template <typename T, typename F, typename... Ins>
void map2(const F& f, const Tensor& out0, const Tensor& out1, const Ins&... ins) {
  static_assert(sizeof...(Ins) >= 1 && (std::is_same_v<Ins, Tensor> && ...));
  using C = opmath_t<T>;
  constexpr int M = sizeof...(Ins);
  const int64_t n = out0.numel();
  MT_CHECK(out0.is_contiguous() && out1.is_contiguous() && (ins.is_contiguous() && ...) && out1.numel() == n &&
               ((ins.numel() == n) && ...),
           "elementwise map2: expected contiguous operands of one shape");
  if (n == 0) return;
  T* const o0 = static_cast<T*>(host_data(out0));
  T* const o1 = static_cast<T*>(host_data(out1));
  const std::array<const T*, M> p{static_cast<const T*>(host_data(ins))...};
  const cpu::Isa isa = cpu::isa();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  parallel_for(blocks, kGrainSize / kBlock, [&](int64_t b, int64_t e) {
    alignas(64) C res0[kBlock];
    alignas(64) C res1[kBlock];
    alignas(64) C buf[M][kBlock];
    for (int64_t blk = b; blk < e; ++blk) {
      const int64_t s = blk * kBlock, m = std::min(kBlock, n - s);
      [&]<size_t... I>(std::index_sequence<I...>) {
        apply2(isa, f, res0, res1, m, load_run<T>(p[I] + s, 1, m, buf[I])...);
      }
      (std::make_index_sequence<M>{});
      store_run(o0 + s, 1, m, res0);
      store_run(o1 + s, 1, m, res1);
    }
  });
}

}  // namespace mixtrain::kernels::ew
