// nvcuda::wmma on the host: 16x16x16 fragments with bf16/fp16 inputs and fp32 accumulators, as the
// flash attention kernels use them. The layout of a real fragment is unspecified, so here every lane
// holds the whole tile, and every operation is warp-wide: all 32 lanes must call it at the same site
// (checked like a warp op), with the documented alignment (a 256-bit aligned pointer, ldm a multiple
// of 16 bytes). mma_sync accumulates in fp32 in order of k; a tensor core's rounding and order are not
// modelled (docs/cuda.md).
#pragma once

#include <cstdint>
#include <type_traits>

#include "backends/cuda/host/cuda_on_host.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "mixtrain/error.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
inline float widen(float v) { return v; }
inline float widen(__half v) { return __half2float(v); }
inline float widen(__nv_bfloat16 v) { return __bfloat162float(v); }

// All lanes of the warp meet here: wmma operations are warp-collective.
inline void warp_collective(::mixtrain::cuda_host::Site site) { (void)::mixtrain::cuda_host::ballot(0xffffffffu, true, site); }

template <typename T>
void check_operand(const T* p, unsigned ldm, ::mixtrain::cuda_host::Site site) {
  MT_CHECK(reinterpret_cast<uintptr_t>(p) % 32 == 0, "CUDA on the host: wmma at ", site.file, ":", site.line,
           ": the pointer must be 256-bit aligned");
  MT_CHECK((ldm * sizeof(T)) % 16 == 0, "CUDA on the host: wmma at ", site.file, ":", site.line, ": ldm ", ldm,
           " is not a multiple of 16 bytes");
}
}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the host's wmma has the 16x16x16 shape only");
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = rows * cols;
  float x[num_elements] = {};  // the whole tile, row-major, widened exactly to fp32
};

template <typename Use, int M, int N, int K, typename T, typename Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, float value) {
  for (float& v : f.x) v = value;
}

// Input fragments (matrix_a / matrix_b): the layout is the fragment's.
template <typename Use, int M, int N, int K, typename T, typename Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned ldm,
                      ::mixtrain::cuda_host::Site site = ::mixtrain::cuda_host::Site::here()) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator load takes a layout_t");
  detail::warp_collective(site);
  detail::check_operand(p, ldm, site);
  using F = fragment<Use, M, N, K, T, Layout>;
  for (int r = 0; r < F::rows; ++r)
    for (int c = 0; c < F::cols; ++c)
      f.x[r * F::cols + c] = detail::widen(std::is_same_v<Layout, row_major> ? p[r * ldm + c] : p[c * ldm + r]);
}

// Accumulators: fp32, with the memory layout given.
template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ldm, layout_t layout,
                      ::mixtrain::cuda_host::Site site = ::mixtrain::cuda_host::Site::here()) {
  detail::warp_collective(site);
  detail::check_operand(p, ldm, site);
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c) f.x[r * N + c] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
}

template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm, layout_t layout,
                       ::mixtrain::cuda_host::Site site = ::mixtrain::cuda_host::Site::here()) {
  detail::warp_collective(site);
  detail::check_operand(p, ldm, site);
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c) (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[r * N + c];
  // Every lane stored the same tile; the warp leaves together, so no lane reads a half-written one.
  detail::warp_collective(site);
}

template <int M, int N, int K, typename T, typename LA, typename LB>
void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, T, LA>& a,
              const fragment<matrix_b, M, N, K, T, LB>& b, const fragment<accumulator, M, N, K, float>& c,
              ::mixtrain::cuda_host::Site site = ::mixtrain::cuda_host::Site::here()) {
  detail::warp_collective(site);
  float out[M * N];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float acc = c.x[i * N + j];
      for (int k = 0; k < K; ++k) acc += a.x[i * K + k] * b.x[k * N + j];
      out[i * N + j] = acc;
    }
  for (int e = 0; e < M * N; ++e) d.x[e] = out[e];
}

}  // namespace nvcuda::wmma
