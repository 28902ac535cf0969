// Small dense products for the fused attention kernels (see attention_gemm.h).
//
// Accumulation: fp32 for float, fp64 for double; each C element sums its k terms in increasing k.
#include "core/isa_target.h"
#include "backends/cpu/kernels/attention_gemm.h"

#include <algorithm>

#include "mixtrain/cpu.h"

#if MT_X86_TARGETS
#include <immintrin.h>
#endif

namespace mixtrain::kernels::attn {
namespace {

// k range [begin, end) of the terms that can be non-zero for rows [i0, i1) of C.
struct KRange {
  int64_t begin, end;
};
inline KRange k_range(const Band& band, int64_t K, int64_t i0, int64_t i1) {
  const int64_t b = band.k_lo == kOff ? 0 : std::max<int64_t>(0, i0 + band.k_lo);
  const int64_t e = band.k_hi == kOff ? K : std::min<int64_t>(K, i1 - 1 + band.k_hi + 1);
  return {b, std::max(b, e)};
}

// Columns [0, n) of C needed by rows [i0, i1).
inline int64_t n_limit(const Band& band, int64_t N, int64_t i1) {
  return band.n_hi == kOff ? N : std::clamp<int64_t>(i1 - 1 + band.n_hi + 1, 0, N);
}

template <typename F>
void gemm_generic(int64_t M, int64_t N, int64_t K, const F* A, int64_t rsa, int64_t csa, const F* B, int64_t ldb, F* C,
                  int64_t ldc, bool accumulate, const Band& band) {
  for (int64_t i = 0; i < M; ++i) {
    F* c = C + i * ldc;
    const int64_t n = n_limit(band, N, i + 1);
    if (!accumulate) std::fill(c, c + n, F(0));
    const KRange kr = k_range(band, K, i, i + 1);
    for (int64_t k = kr.begin; k < kr.end; ++k) {
      const F a = A[i * rsa + k * csa];
      const F* b = B + k * ldb;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) c[j] += a * b[j];
    }
  }
}

// a [R, C] (rows lda apart) -> out [C, R], in 16 x 16 tiles: both sides stay within a few cache
// lines, where a column-at-a-time transpose would store to a different line on every element.
template <typename F>
void transpose_generic(const F* a, int64_t lda, int64_t R, int64_t C, F* out) {
  constexpr int64_t kTile = 16;
  for (int64_t r0 = 0; r0 < R; r0 += kTile) {
    const int64_t r1 = std::min(R, r0 + kTile);
    for (int64_t c0 = 0; c0 < C; c0 += kTile) {
      const int64_t c1 = std::min(C, c0 + kTile);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) out[c * R + r] = a[r * lda + c];
    }
  }
}

#if MT_X86_TARGETS


constexpr int kMr = 6;  // rows of C per register tile
constexpr int kNv = 4;  // 16-float vectors of C per tile row (64 columns)

// C[0:MR, 0:16*NV] (+)= A[0:MR, k0:k1] @ B[k0:k1, 0:16*NV]; the last vector of each row is masked.
template <int MR, int NV>
MT_TARGET_AVX512 void tile(int64_t k0, int64_t k1, const float* A, int64_t rsa, int64_t csa, const float* B, int64_t ldb,
                         float* C, int64_t ldc, bool accumulate, __mmask16 last) {
  __m512 c[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      if (!accumulate) {
        c[i][v] = _mm512_setzero_ps();
      } else if (v == NV - 1) {
        c[i][v] = _mm512_maskz_loadu_ps(last, C + i * ldc + 16 * v);
      } else {
        c[i][v] = _mm512_loadu_ps(C + i * ldc + 16 * v);
      }
    }
  }
  for (int64_t k = k0; k < k1; ++k) {
    const float* b = B + k * ldb;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      bv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, b + 16 * v) : _mm512_loadu_ps(b + 16 * v);
    const float* a = A + k * csa;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(a[i * rsa]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) c[i][v] = _mm512_fmadd_ps(av, bv[v], c[i][v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      if (v == NV - 1) {
        _mm512_mask_storeu_ps(C + i * ldc + 16 * v, last, c[i][v]);
      } else {
        _mm512_storeu_ps(C + i * ldc + 16 * v, c[i][v]);
      }
    }
  }
}

using TileFn = void (*)(int64_t, int64_t, const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t, bool,
                        __mmask16);

template <int MR>
constexpr TileFn tile_for(int nv) {
  switch (nv) {
    case 1: return &tile<MR, 1>;
    case 2: return &tile<MR, 2>;
    case 3: return &tile<MR, 3>;
    default: return &tile<MR, 4>;
  }
}

TileFn tile_fn(int mr, int nv) {
  switch (mr) {
    case 1: return tile_for<1>(nv);
    case 2: return tile_for<2>(nv);
    case 3: return tile_for<3>(nv);
    case 4: return tile_for<4>(nv);
    case 5: return tile_for<5>(nv);
    default: return tile_for<6>(nv);
  }
}

// The tile loop of the vector kernels: C in tiles of up to kRows rows x kLanes * kMaxVectors
// columns; tiles right of the causal band are skipped and tiles that cross it are cut to the
// vectors that hold a needed column (on the diagonal of a causal block this halves the work),
// tiles whose k range is empty are zeroed (or left, when accumulating), the rest go to
// tile(mr, nv, last, k0, k1, A, B, C) with the number of valid lanes (1..kLanes) in the last of the
// nv vectors. Cutting a tile changes which elements are written, never how one is summed.
template <int kRows, int kLanes, int kMaxVectors, typename Tile>
void for_each_tile(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsa, const float* B, float* C, int64_t ldc,
                   bool accumulate, const Band& band, Tile&& tile) {
  for (int64_t j0 = 0; j0 < N; j0 += kLanes * kMaxVectors) {
    const int64_t width = std::min<int64_t>(kLanes * kMaxVectors, N - j0);
    for (int64_t i0 = 0; i0 < M; i0 += kRows) {
      const int mr = static_cast<int>(std::min<int64_t>(kRows, M - i0));
      const int64_t needed = n_limit(band, N, i0 + mr) - j0;  // columns of this tile some row needs
      if (needed <= 0) continue;
      // Whole vectors up to the last needed column (never past N).
      const int64_t nb = std::min<int64_t>(width, (needed + kLanes - 1) / kLanes * kLanes);
      const int nv = static_cast<int>((nb + kLanes - 1) / kLanes);
      const int last = static_cast<int>(nb - kLanes * (nv - 1));
      const KRange kr = k_range(band, K, i0, i0 + mr);
      float* c = C + i0 * ldc + j0;
      if (kr.end <= kr.begin) {
        if (!accumulate)
          for (int i = 0; i < mr; ++i) std::fill(c + i * ldc, c + i * ldc + nb, 0.0f);
        continue;
      }
      tile(mr, nv, last, kr.begin, kr.end, A + i0 * rsa, B + j0, c);
    }
  }
}

void gemm_avx512(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsa, int64_t csa, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate, const Band& band) {
  for_each_tile<kMr, 16, kNv>(M, N, K, A, rsa, B, C, ldc, accumulate, band,
                              [&](int mr, int nv, int last, int64_t k0, int64_t k1, const float* a, const float* b,
                                  float* c) {
                                const __mmask16 mask = last == 16 ? __mmask16(0xFFFF) : __mmask16((1u << last) - 1);
                                tile_fn(mr, nv)(k0, k1, a, rsa, csa, b, ldb, c, ldc, accumulate, mask);
                              });
}

// ---- AVX2 + FMA: the same scheme with 8-float vectors, 6 rows x 16 columns of C per tile (12
// accumulators, 2 vectors of B and one broadcast of A: 15 of the 16 ymm registers). The same
// FMAs in the same k order per element as the AVX-512 tile.


constexpr int kMr2 = 6;  // rows of C per AVX2 tile
constexpr int kNv2 = 2;  // 8-float vectors of C per AVX2 tile row (16 columns)

// Lane mask for the first `n` (1..8) floats of a vector (maskload/maskstore read the sign bit).
MT_TARGET_AVX2 inline __m256i lanes(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

template <int MR, int NV>
MT_TARGET_AVX2 void tile2(int64_t k0, int64_t k1, const float* A, int64_t rsa, int64_t csa, const float* B,
                               int64_t ldb, float* C, int64_t ldc, bool accumulate, int last_n) {
  const __m256i last = lanes(last_n);
  __m256 c[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      if (!accumulate) {
        c[i][v] = _mm256_setzero_ps();
      } else if (v == NV - 1) {
        c[i][v] = _mm256_maskload_ps(C + i * ldc + 8 * v, last);
      } else {
        c[i][v] = _mm256_loadu_ps(C + i * ldc + 8 * v);
      }
    }
  }
  for (int64_t k = k0; k < k1; ++k) {
    const float* b = B + k * ldb;
    __m256 bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) bv[v] = v == NV - 1 ? _mm256_maskload_ps(b + 8 * v, last) : _mm256_loadu_ps(b + 8 * v);
    const float* a = A + k * csa;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_broadcast_ss(a + i * rsa);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) c[i][v] = _mm256_fmadd_ps(av, bv[v], c[i][v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      if (v == NV - 1) {
        _mm256_maskstore_ps(C + i * ldc + 8 * v, last, c[i][v]);
      } else {
        _mm256_storeu_ps(C + i * ldc + 8 * v, c[i][v]);
      }
    }
  }
}

using Tile2Fn = void (*)(int64_t, int64_t, const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t, bool,
                         int);

template <int MR>
constexpr Tile2Fn tile2_for(int nv) {
  return nv == 1 ? &tile2<MR, 1> : &tile2<MR, 2>;
}

Tile2Fn tile2_fn(int mr, int nv) {
  switch (mr) {
    case 1: return tile2_for<1>(nv);
    case 2: return tile2_for<2>(nv);
    case 3: return tile2_for<3>(nv);
    case 4: return tile2_for<4>(nv);
    case 5: return tile2_for<5>(nv);
    default: return tile2_for<6>(nv);
  }
}

void gemm_avx2(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsa, int64_t csa, const float* B, int64_t ldb,
               float* C, int64_t ldc, bool accumulate, const Band& band) {
  for_each_tile<kMr2, 8, kNv2>(M, N, K, A, rsa, B, C, ldc, accumulate, band,
                               [&](int mr, int nv, int last, int64_t k0, int64_t k1, const float* a, const float* b,
                                   float* c) { tile2_fn(mr, nv)(k0, k1, a, rsa, csa, b, ldb, c, ldc, accumulate, last); });
}

// 8 x 8 blocks through registers (unpack, shuffle, lane swap: 24 shuffles per 64 floats), the
// ragged right and bottom edges through the generic loop. Pure data movement: the same bits at
// every level.
MT_TARGET_AVX2 void transpose_avx2(const float* a, int64_t lda, int64_t R, int64_t C, float* out) {
  const int64_t R8 = R - R % 8, C8 = C - C % 8;
  for (int64_t r0 = 0; r0 < R8; r0 += 8) {
    for (int64_t c0 = 0; c0 < C8; c0 += 8) {
      const float* s = a + r0 * lda + c0;
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(s + i * lda);
      __m256 t[8];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
      }
      __m256 u[8];
#pragma GCC unroll 2
      for (int i = 0; i < 2; ++i) {
        u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
      }
      float* d = out + c0 * R + r0;
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        _mm256_storeu_ps(d + i * R, _mm256_permute2f128_ps(u[i], u[4 + i], 0x20));
        _mm256_storeu_ps(d + (4 + i) * R, _mm256_permute2f128_ps(u[i], u[4 + i], 0x31));
      }
    }
  }
  if (C8 < C) {  // right edge, full height
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = C8; c < C; ++c) out[c * R + r] = a[r * lda + c];
  }
  if (R8 < R) {  // bottom edge, left of the right edge
    for (int64_t c = 0; c < C8; ++c)
      for (int64_t r = R8; r < R; ++r) out[c * R + r] = a[r * lda + c];
  }
}

#endif  // MT_X86_TARGETS

}  // namespace

void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsa, int64_t csa, const float* B, int64_t ldb,
          float* C, int64_t ldc, bool accumulate, const Band& band) {
#if MT_X86_TARGETS
  if (cpu::isa() >= cpu::Isa::kAvx512)
    return gemm_avx512(M, N, K, A, rsa, csa, B, ldb, C, ldc, accumulate, band);
  if (cpu::isa() >= cpu::Isa::kAvx2) return gemm_avx2(M, N, K, A, rsa, csa, B, ldb, C, ldc, accumulate, band);
#endif
  gemm_generic(M, N, K, A, rsa, csa, B, ldb, C, ldc, accumulate, band);
}

void gemm(int64_t M, int64_t N, int64_t K, const double* A, int64_t rsa, int64_t csa, const double* B, int64_t ldb,
          double* C, int64_t ldc, bool accumulate, const Band& band) {
  gemm_generic(M, N, K, A, rsa, csa, B, ldb, C, ldc, accumulate, band);
}

void transpose(const float* a, int64_t lda, int64_t R, int64_t C, float* out) {
#if MT_X86_TARGETS
  if (cpu::isa() >= cpu::Isa::kAvx2) return transpose_avx2(a, lda, R, C, out);
#endif
  transpose_generic(a, lda, R, C, out);
}

void transpose(const double* a, int64_t lda, int64_t R, int64_t C, double* out) {
  transpose_generic(a, lda, R, C, out);
}

}  // namespace mixtrain::kernels::attn
