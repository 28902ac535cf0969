// Tensor-core fused attention for bf16 and fp16 (the kernels behind attention.cu's dispatch for
// 16-bit inputs; the contract is kernels/nn.h's AttentionFwdFn / AttentionBwdFn):
//
//   forward:  out = softmax(scale q k^T [causal: query t sees keys s <= t]) v,  lse = log-sum-exp
//   backward: P = exp(scale q k^T - lse);  dP = gout v^T;  delta = rowsum(P * dP);
//             dS = scale P (dP - delta);  gq = dS k;  gk = dS^T q;  gv = P^T gout
//
// per (batch, head), FlashAttention-style: the [T, S] matrices exist only one tile at a time in
// shared memory, and the forward keeps an online softmax (running row max and sum).
//
// Tiles. A block has 4 warps (128 threads); each warp owns 16 rows of the block's 64-row tile, the
// height of one WMMA fragment, so the warps never share a row and synchronise with __syncwarp
// except around the tiles they all read.
//   forward:          64 queries per block, keys in steps of 64;
//   gq (and delta):   64 queries per block, keys in steps of 64;
//   gk, gv:           64 keys per block, queries in steps of 32 (two fp32 gradient tiles of 64 x D
//                     leave room for no more: the kernel must fit sm_80's 163 KB per block).
// Shared memory per block, sized at run time from D: forward 110 KB, gq 144 KB, gk/gv 145.25 KB for
// D = 128; 70 KB, 96 KB, 89.25 KB for D = 64; 40 KB, 60 KB, 47.25 KB for D = 16. 4 warps per block.
//
// Precision. Inputs are 16-bit, every product accumulates in fp32 (WMMA 16x16x16 with a float
// accumulator), the softmax runs in fp32 (scale applied to the fp32 scores, masked scores -inf, the
// running max and sum in fp32). Two intermediates are rounded to the input's 16-bit type because a
// tensor-core product takes only 16-bit operands, as FlashAttention does: the probabilities P before
// P v (forward) and P^T gout (gv), and dS before dS k (gq) and dS^T q (gk). Each rounding is at most
// half an ulp of the term (2^-8 relative for bf16, 2^-11 for fp16), so an output element is off by at
// most that fraction of the sum of its terms' magnitudes (tests/support/tolerances.h,
// kCudaFlashAttention*); the CPU kernel keeps these in fp32. The row sum of the forward is summed from
// the fp32 probabilities, so lse is the fp32 one. Each output (out, gq, gk, gv) is rounded once, when
// it is stored.
//
// The contract hands backward no `out`, so delta = rowsum(gout * out) is computed as the equal
// rowsum(P * dP) from the recomputed P, in a first sweep of the gq kernel over the key tiles (in fp32,
// with the unrounded out that the identity implies); the gk/gv kernel reads it from there.
//
// Determinism: no atomics. gq rows are summed by the one block that owns their query tile, gk/gv
// rows by the one block that owns their key tile, each in a fixed order of tiles and of WMMA steps;
// the row max/sum/delta of a row is owned by one pair of lanes and combined in a fixed order. Every
// element of out, lse, gq, gk and gv is written (zeros where no key is visible / no query sees a
// key, lse = -inf when S == 0, as the CPU kernel does).
//
// Shapes taken (attention_flash.h): D == Dv, a multiple of 16 and at most 128; any T, S, batch and
// heads; strided q/k/v/out/gradient views whose rows start 16 bytes aligned (checked at run time:
// rows move as 16-byte vectors); compute capability 8.0+ with enough shared memory per block.
// Everything else (fp32, fp64, other head dims, unaligned rows, and D = 128 on sm_86/sm_89 parts,
// whose 99 KB per block do not hold its tiles) declines and runs attention.cu's warp-per-row kernels.
//
// Why WMMA (nvcuda::wmma) rather than hand-written mma.sync: the fragment layout of WMMA is opaque
// and every element-wise step (scale, mask, exp, row max/sum, rescaling of the output accumulator)
// goes through tiles stored to shared memory in plain row-major order, so no index arithmetic
// depends on the register layout of a particular architecture. It leaves speed on the table
// (accumulators travel through shared memory, one 64 x 64 score tile per step), for kernels that are
// correct by construction on both sm_80 and sm_90.
#include <mma.h>

#include <cmath>
#include <mutex>
#include <set>
#include <utility>

#include "backends/cuda/kernels/attention_flash.h"
#include "backends/cuda/kernels/common.cuh"

namespace mixtrain::kernels::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kWarpSize = 32;
constexpr int kFlashWarps = 4;
constexpr int kFlashThreads = kFlashWarps * kWarpSize;
constexpr int kFrag = 16;                                // WMMA tile: m = n = k = 16
constexpr int kRowsPerWarp = kFrag;                      // a warp owns one fragment's height of rows
constexpr int kBlockRows = kFlashWarps * kRowsPerWarp;   // queries (forward, gq) or keys (gk/gv) per block
constexpr int kKeyStep = 64;                             // keys per step of the forward and gq kernels
constexpr int kQueryStep = 32;                           // queries per step of the gk/gv kernel
constexpr int kFlashMaxHeadDim = 128;
constexpr int kVectorElems = 8;                          // 16-bit values per 16-byte load or store
constexpr unsigned kFullMask = 0xffffffffu;
// Row pitches are padded by 16 bytes so that consecutive rows start in other shared-memory banks;
// they stay multiples of 8 (16-bit) and 4 (fp32) elements, as WMMA's ldm must.
constexpr int kHalfPad = 8;
constexpr int kFloatPad = 4;
constexpr int kHalfBytes = 2;  // sizeof(__half) == sizeof(__nv_bfloat16)
constexpr int kFloatBytes = 4;
static_assert(kKeyStep % kFrag == 0 && kQueryStep % kFrag == 0 && kFlashMaxHeadDim % kFrag == 0);
static_assert(kKeyStep % 2 == 0 && kQueryStep % 2 == 0, "a lane pair splits a tile row into even and odd columns");

// ---- shared-memory layouts, computed the same way on the host (launch size) and the device (carve-up)
// Regions start 128-byte aligned: WMMA's load/store need 32-byte aligned pointers, and every fragment
// pointer is a region start plus whole 16-row blocks (16 * pitch * element size, a multiple of 256 bytes)
// plus whole 16-column blocks (32 or 64 bytes).
struct SmemCarver {
  size_t used = 0;
  __host__ __device__ size_t take(size_t bytes) {
    const size_t at = used;
    used += (bytes + 127) / 128 * 128;
    return at;
  }
};

__host__ __device__ constexpr int half_pitch(int width) { return width + kHalfPad; }
__host__ __device__ constexpr int float_pitch(int width) { return width + kFloatPad; }

struct ForwardLayout {
  int row_pitch, score_pitch, prob_pitch, acc_pitch;  // elements
  size_t q, k, v, scores, probs, acc, bytes;          // byte offsets; total
  __host__ __device__ explicit ForwardLayout(int D)
      : row_pitch(half_pitch(D)), score_pitch(float_pitch(kKeyStep)), prob_pitch(half_pitch(kKeyStep)),
        acc_pitch(float_pitch(D)) {
    SmemCarver c;
    q = c.take(size_t{kBlockRows} * row_pitch * kHalfBytes);
    k = c.take(size_t{kKeyStep} * row_pitch * kHalfBytes);
    v = c.take(size_t{kKeyStep} * row_pitch * kHalfBytes);
    scores = c.take(size_t{kBlockRows} * score_pitch * kFloatBytes);
    probs = c.take(size_t{kBlockRows} * prob_pitch * kHalfBytes);
    acc = c.take(size_t{kBlockRows} * acc_pitch * kFloatBytes);
    bytes = c.used;
  }
};

struct GradQueryLayout {
  int row_pitch, score_pitch, dscore_pitch, acc_pitch;
  size_t q, dout, k, v, scores, dprobs, dscores, acc, bytes;
  __host__ __device__ explicit GradQueryLayout(int D)
      : row_pitch(half_pitch(D)), score_pitch(float_pitch(kKeyStep)), dscore_pitch(half_pitch(kKeyStep)),
        acc_pitch(float_pitch(D)) {
    SmemCarver c;
    q = c.take(size_t{kBlockRows} * row_pitch * kHalfBytes);
    dout = c.take(size_t{kBlockRows} * row_pitch * kHalfBytes);
    k = c.take(size_t{kKeyStep} * row_pitch * kHalfBytes);
    v = c.take(size_t{kKeyStep} * row_pitch * kHalfBytes);
    scores = c.take(size_t{kBlockRows} * score_pitch * kFloatBytes);
    dprobs = c.take(size_t{kBlockRows} * score_pitch * kFloatBytes);
    dscores = c.take(size_t{kBlockRows} * dscore_pitch * kHalfBytes);
    acc = c.take(size_t{kBlockRows} * acc_pitch * kFloatBytes);
    bytes = c.used;
  }
};

// The gk/gv kernel's tiles are transposed: rows are keys, columns queries.
struct GradKeyLayout {
  int row_pitch, score_pitch, prob_pitch, acc_pitch;
  size_t k, v, q, dout, scores, dprobs, probs, dscores, acc_k, acc_v, lse, delta, bytes;
  __host__ __device__ explicit GradKeyLayout(int D)
      : row_pitch(half_pitch(D)), score_pitch(float_pitch(kQueryStep)), prob_pitch(half_pitch(kQueryStep)),
        acc_pitch(float_pitch(D)) {
    SmemCarver c;
    k = c.take(size_t{kBlockRows} * row_pitch * kHalfBytes);
    v = c.take(size_t{kBlockRows} * row_pitch * kHalfBytes);
    q = c.take(size_t{kQueryStep} * row_pitch * kHalfBytes);
    dout = c.take(size_t{kQueryStep} * row_pitch * kHalfBytes);
    scores = c.take(size_t{kBlockRows} * score_pitch * kFloatBytes);
    dprobs = c.take(size_t{kBlockRows} * score_pitch * kFloatBytes);
    probs = c.take(size_t{kBlockRows} * prob_pitch * kHalfBytes);
    dscores = c.take(size_t{kBlockRows} * prob_pitch * kHalfBytes);
    acc_k = c.take(size_t{kBlockRows} * acc_pitch * kFloatBytes);
    acc_v = c.take(size_t{kBlockRows} * acc_pitch * kFloatBytes);
    lse = c.take(size_t{kQueryStep} * kFloatBytes);
    delta = c.take(size_t{kQueryStep} * kFloatBytes);
    bytes = c.used;
  }
};

// ---- kernel arguments (one struct for the three kernels; each reads its own fields)
template <typename X>
struct FlashArgs {
  const X *q = nullptr, *k = nullptr, *v = nullptr, *dout = nullptr;
  X *out = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  float* lse_out = nullptr;       // forward
  const float* lse = nullptr;     // backward
  float* delta = nullptr;         // written by the gq kernel, read by the gk/gv kernel
  int64_t heads = 1, T = 0, S = 0;
  int D = 0;
  int64_t q_st[3] = {}, k_st[3] = {}, v_st[3] = {}, o_st[3] = {};
  float scale = 1.f;
  bool causal = false;
  int64_t tiles = 1;  // row tiles per (batch, head): ceil(T / 64) (forward, gq) or ceil(S / 64) (gk/gv)
};

// ---- device helpers
template <typename X>
using FragA = wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, X, wmma::row_major>;
template <typename X>
using FragBRowMajor = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, X, wmma::row_major>;
template <typename X>
using FragBColMajor = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, X, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;

template <typename P>
__device__ __forceinline__ P* head_of(P* base, const int64_t (&st)[3], int64_t b, int64_t h) {
  return base + b * st[0] + h * st[1];
}

// Copies rows [first, first + rows) of a head (row stride `stride`, D features) into a shared tile of
// row pitch `pitch`, one 16-byte vector per thread and step. Rows at or past `limit` are filled with
// zeros: the products over a partial tile then add exact zeros, never stale shared memory (which may
// hold NaN bit patterns that a zero probability would not cancel).
template <typename X>
__device__ void load_rows(X* tile, int pitch, const X* head, int64_t stride, int64_t first, int rows, int64_t limit,
                          int D) {
  const int vectors_per_row = D / kVectorElems;
  for (int i = threadIdx.x; i < rows * vectors_per_row; i += blockDim.x) {
    const int r = i / vectors_per_row, c = (i - r * vectors_per_row) * kVectorElems;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (first + r < limit) value = *MT_VECTOR_ACCESS(reinterpret_cast<const uint4*>(head + (first + r) * stride + c));
    *MT_VECTOR_ACCESS(reinterpret_cast<uint4*>(tile + r * pitch + c)) = value;
  }
}

template <typename C>
__device__ void zero_fill(C* tile, int count) {
  for (int i = threadIdx.x; i < count; i += blockDim.x) tile[i] = C(0);
}

// One warp: out[16][n] = a[16][depth] * b[n][depth]^T (b's rows are the columns of the product, as k's
// rows are for q k^T). a row-major with pitch lda; b read as a column-major depth x n matrix, whose
// element (i, j) sits at b[j * ldb + i]. n and depth are multiples of 16.
template <typename X>
__device__ void warp_product_abt(const X* a, int lda, const X* b, int ldb, float* out, int ldo, int n, int depth) {
  for (int j = 0; j < n; j += kFrag) {
    FragAcc acc;
    wmma::fill_fragment(acc, 0.f);
    for (int i = 0; i < depth; i += kFrag) {
      FragA<X> fa;
      FragBColMajor<X> fb;
      wmma::load_matrix_sync(fa, a + i, lda);
      wmma::load_matrix_sync(fb, b + j * ldb + i, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + j, acc, ldo, wmma::mem_row_major);
  }
}

// One warp: acc[16][n] += a[16][depth] * b[depth][n], a and b row-major, acc fp32 row-major in shared
// memory (loaded into the fragment, accumulated, stored back: its layout never matters).
template <typename X>
__device__ void warp_accumulate_ab(const X* a, int lda, const X* b, int ldb, float* acc_rows, int ldacc, int n,
                                   int depth) {
  for (int j = 0; j < n; j += kFrag) {
    FragAcc acc;
    wmma::load_matrix_sync(acc, acc_rows + j, ldacc, wmma::mem_row_major);
    for (int i = 0; i < depth; i += kFrag) {
      FragA<X> fa;
      FragBRowMajor<X> fb;
      wmma::load_matrix_sync(fa, a + i, lda);
      wmma::load_matrix_sync(fb, b + i * ldb + j, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(acc_rows + j, acc, ldacc, wmma::mem_row_major);
  }
}

// Rounds one fp32 accumulator row (times `factor`) once into X and stores it to global memory. The
// two lanes of the row's pair take alternate 8-value vectors (16-byte stores).
template <typename X>
__device__ void store_row(X* dst, const float* src, float factor, int D, int half) {
  for (int f = half * kVectorElems; f < D; f += 2 * kVectorElems) {
    Pack16<X> pack;
#pragma unroll
    for (int e = 0; e < Pack16<X>::kCount; ++e) pack.v[e] = round_to<X>(src[f + e] * factor);
    *MT_VECTOR_ACCESS(reinterpret_cast<Pack16<X>*>(dst + f)) = pack;
  }
}

// ---- forward: a block owns 64 queries of one (batch, head); warp w owns rows [16 w, 16 w + 16) of
// them; the lane pair (2 r, 2 r + 1) owns row 16 w + r: its running max and sum (kept, identical, in
// both lanes' registers) and the element-wise work of its row, the even columns in the first lane and
// the odd ones in the second.
template <typename X>
__global__ void __launch_bounds__(kFlashThreads) flash_attention_fwd_kernel(FlashArgs<X> a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // never launched: the host takes this path on compute capability 8.0+ only
#else
  MT_DYNAMIC_SHARED(unsigned char, smem);
  const ForwardLayout L(a.D);
  X* const q_tile = reinterpret_cast<X*>(smem + L.q);
  X* const k_tile = reinterpret_cast<X*>(smem + L.k);
  X* const v_tile = reinterpret_cast<X*>(smem + L.v);
  float* const scores = reinterpret_cast<float*>(smem + L.scores);
  X* const probs = reinterpret_cast<X*>(smem + L.probs);
  float* const acc = reinterpret_cast<float*>(smem + L.acc);

  const int64_t bh = blockIdx.x / a.tiles;
  // Causal tiles further down see more keys: the last tile of each head is launched first.
  const int64_t tile = a.tiles - 1 - blockIdx.x % a.tiles;
  const int64_t b = bh / a.heads, h = bh % a.heads, t0 = tile * kBlockRows;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int warp_row0 = warp * kRowsPerWarp;
  const int row = warp_row0 + lane / 2, half = lane % 2;
  const int64_t t = t0 + row;
  const int64_t key_limit = a.causal ? min(a.S, t + 1) : a.S;  // row t sees keys [0, key_limit)
  // Keys any row of the tile sees (rows past T see nothing that is stored).
  const int64_t keys = a.causal ? min(a.S, min(a.T, t0 + kBlockRows)) : a.S;

  load_rows(q_tile, L.row_pitch, head_of(a.q, a.q_st, b, h), a.q_st[2], t0, kBlockRows, a.T, a.D);
  zero_fill(acc, kBlockRows * L.acc_pitch);
  const X* const k_head = head_of(a.k, a.k_st, b, h);
  const X* const v_head = head_of(a.v, a.v_st, b, h);
  float* const score_row = scores + row * L.score_pitch;
  X* const prob_row = probs + row * L.prob_pitch;
  float* const acc_row = acc + row * L.acc_pitch;
  float row_max = -INFINITY, row_sum = 0.f;

  for (int64_t s0 = 0; s0 < keys; s0 += kKeyStep) {
    __syncthreads();  // every warp is done with the previous k/v tiles (and q and acc are filled)
    load_rows(k_tile, L.row_pitch, k_head, a.k_st[2], s0, kKeyStep, a.S, a.D);
    load_rows(v_tile, L.row_pitch, v_head, a.v_st[2], s0, kKeyStep, a.S, a.D);
    __syncthreads();
    warp_product_abt(q_tile + warp_row0 * L.row_pitch, L.row_pitch, k_tile, L.row_pitch,
                     scores + warp_row0 * L.score_pitch, L.score_pitch, kKeyStep, a.D);
    __syncwarp();
    // Online softmax step of this row: scale in fp32, mask to -inf, new max, rescale what came before.
    float step_max = -INFINITY;
    for (int c = half; c < kKeyStep; c += 2) {
      const float x = s0 + c < key_limit ? score_row[c] * a.scale : -INFINITY;
      score_row[c] = x;
      step_max = fmaxf(step_max, x);
    }
    step_max = fmaxf(step_max, __shfl_xor_sync(kFullMask, step_max, 1));
    const float new_max = fmaxf(row_max, step_max);
    // A row that has seen no visible key yet keeps max -inf: subtracting 0 then gives exp(-inf) = 0
    // rather than exp(-inf + inf) = NaN.
    const float shift = new_max == -INFINITY ? 0.f : new_max;
    const float rescale = expf(row_max - shift);  // 0 at the first visible key (max -inf), 1 when it stays
    float step_sum = 0.f;
    for (int c = half; c < kKeyStep; c += 2) {
      const float p = expf(score_row[c] - shift);
      prob_row[c] = round_to<X>(p);  // the 16-bit operand of P v
      step_sum += p;                 // the sum (and so lse) stays the fp32 one
    }
    step_sum += __shfl_xor_sync(kFullMask, step_sum, 1);
    row_sum = row_sum * rescale + step_sum;
    row_max = new_max;
    for (int f = half; f < a.D; f += 2) acc_row[f] *= rescale;
    __syncwarp();
    warp_accumulate_ab(probs + warp_row0 * L.prob_pitch, L.prob_pitch, v_tile, L.row_pitch,
                       acc + warp_row0 * L.acc_pitch, L.acc_pitch, a.D, kKeyStep);
  }
  __syncthreads();  // acc is complete (and zero-filled by all threads when there was no key step)
  if (t < a.T) {
    store_row(head_of(a.out, a.o_st, b, h) + t * a.o_st[2], acc_row, row_sum > 0.f ? 1.f / row_sum : 0.f, a.D,
              half);
    if (half == 0) a.lse_out[bh * a.T + t] = row_sum > 0.f ? row_max + logf(row_sum) : -INFINITY;
  }
#endif
}

// ---- gq (and delta): a block owns 64 queries, rows owned as in the forward. Two sweeps over the key
// tiles: the first sums delta = rowsum(P * dP), the second dS = scale P (dP - delta) and gq += dS k.
template <typename X>
__global__ void __launch_bounds__(kFlashThreads) flash_attention_dq_kernel(FlashArgs<X> a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  MT_DYNAMIC_SHARED(unsigned char, smem);
  const GradQueryLayout L(a.D);
  X* const q_tile = reinterpret_cast<X*>(smem + L.q);
  X* const dout_tile = reinterpret_cast<X*>(smem + L.dout);
  X* const k_tile = reinterpret_cast<X*>(smem + L.k);
  X* const v_tile = reinterpret_cast<X*>(smem + L.v);
  float* const scores = reinterpret_cast<float*>(smem + L.scores);
  float* const dprobs = reinterpret_cast<float*>(smem + L.dprobs);
  X* const dscores = reinterpret_cast<X*>(smem + L.dscores);
  float* const acc = reinterpret_cast<float*>(smem + L.acc);

  const int64_t bh = blockIdx.x / a.tiles;
  const int64_t tile = a.tiles - 1 - blockIdx.x % a.tiles;  // heaviest causal tile first
  const int64_t b = bh / a.heads, h = bh % a.heads, t0 = tile * kBlockRows;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int warp_row0 = warp * kRowsPerWarp;
  const int row = warp_row0 + lane / 2, half = lane % 2;
  const int64_t t = t0 + row;
  const bool live = t < a.T;  // rows past T are computed on zeros and never stored
  const int64_t key_limit = a.causal ? min(a.S, t + 1) : a.S;
  const int64_t keys = a.causal ? min(a.S, min(a.T, t0 + kBlockRows)) : a.S;
  const float row_lse = live ? a.lse[bh * a.T + t] : 0.f;
  // This row's gq destination, formed now: the batch, head and row indices then need not stay live
  // through the key sweeps.
  X* const dq_row = live ? head_of(a.dq, a.q_st, b, h) + t * a.q_st[2] : nullptr;

  load_rows(q_tile, L.row_pitch, head_of(a.q, a.q_st, b, h), a.q_st[2], t0, kBlockRows, a.T, a.D);
  load_rows(dout_tile, L.row_pitch, head_of(a.dout, a.o_st, b, h), a.o_st[2], t0, kBlockRows, a.T, a.D);
  zero_fill(acc, kBlockRows * L.acc_pitch);
  const X* const k_head = head_of(a.k, a.k_st, b, h);
  const X* const v_head = head_of(a.v, a.v_st, b, h);
  const float* const score_row = scores + row * L.score_pitch;
  const float* const dprob_row = dprobs + row * L.score_pitch;
  X* const dscore_row = dscores + row * L.dscore_pitch;

  // Scores q k^T and dP = gout v^T of this warp's 16 rows against key tile s0 (fp32, shared memory).
  auto step_products = [&](int64_t s0) {
    __syncthreads();  // every warp is done with the previous k/v tiles
    load_rows(k_tile, L.row_pitch, k_head, a.k_st[2], s0, kKeyStep, a.S, a.D);
    load_rows(v_tile, L.row_pitch, v_head, a.v_st[2], s0, kKeyStep, a.S, a.D);
    __syncthreads();
    warp_product_abt(q_tile + warp_row0 * L.row_pitch, L.row_pitch, k_tile, L.row_pitch,
                     scores + warp_row0 * L.score_pitch, L.score_pitch, kKeyStep, a.D);
    warp_product_abt(dout_tile + warp_row0 * L.row_pitch, L.row_pitch, v_tile, L.row_pitch,
                     dprobs + warp_row0 * L.score_pitch, L.score_pitch, kKeyStep, a.D);
    __syncwarp();
  };
  auto probability = [&](float score) { return expf(fmaf(score, a.scale, -row_lse)); };

  float delta_part = 0.f;
  for (int64_t s0 = 0; s0 < keys; s0 += kKeyStep) {
    step_products(s0);
    for (int c = half; c < kKeyStep; c += 2)
      if (live && s0 + c < key_limit) delta_part += probability(score_row[c]) * dprob_row[c];
  }
  const float delta = delta_part + __shfl_xor_sync(kFullMask, delta_part, 1);
  if (live && half == 0) a.delta[bh * a.T + t] = delta;

  for (int64_t s0 = 0; s0 < keys; s0 += kKeyStep) {
    step_products(s0);
    for (int c = half; c < kKeyStep; c += 2) {
      float ds = 0.f;
      if (live && s0 + c < key_limit) ds = probability(score_row[c]) * (dprob_row[c] - delta) * a.scale;
      dscore_row[c] = round_to<X>(ds);  // the 16-bit operand of dS k
    }
    __syncwarp();
    warp_accumulate_ab(dscores + warp_row0 * L.dscore_pitch, L.dscore_pitch, k_tile, L.row_pitch,
                       acc + warp_row0 * L.acc_pitch, L.acc_pitch, a.D, kKeyStep);
  }
  __syncthreads();  // acc is complete (and zero-filled by all threads when there was no key step)
  if (live) store_row(dq_row, acc + row * L.acc_pitch, 1.f, a.D, half);
#endif
}

// ---- gk, gv: a block owns 64 keys of one (batch, head); warp w owns keys [16 w, 16 w + 16), the lane
// pair (2 r, 2 r + 1) key 16 w + r. The score tiles are transposed (S^T = k q^T, dP^T = v gout^T: rows
// are this block's keys), so gv += P^T gout and gk += dS^T q are plain row-major products.
template <typename X>
__global__ void __launch_bounds__(kFlashThreads) flash_attention_dkv_kernel(FlashArgs<X> a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  MT_DYNAMIC_SHARED(unsigned char, smem);
  const GradKeyLayout L(a.D);
  X* const k_tile = reinterpret_cast<X*>(smem + L.k);
  X* const v_tile = reinterpret_cast<X*>(smem + L.v);
  X* const q_tile = reinterpret_cast<X*>(smem + L.q);
  X* const dout_tile = reinterpret_cast<X*>(smem + L.dout);
  float* const scores = reinterpret_cast<float*>(smem + L.scores);
  float* const dprobs = reinterpret_cast<float*>(smem + L.dprobs);
  X* const probs = reinterpret_cast<X*>(smem + L.probs);
  X* const dscores = reinterpret_cast<X*>(smem + L.dscores);
  float* const acc_k = reinterpret_cast<float*>(smem + L.acc_k);
  float* const acc_v = reinterpret_cast<float*>(smem + L.acc_v);
  float* const lse_tile = reinterpret_cast<float*>(smem + L.lse);
  float* const delta_tile = reinterpret_cast<float*>(smem + L.delta);

  const int64_t bh = blockIdx.x / a.tiles;
  // Causal: the first key tiles are seen by the most queries and are launched first, as they come.
  const int64_t tile = blockIdx.x % a.tiles;
  const int64_t b = bh / a.heads, h = bh % a.heads, s0 = tile * kBlockRows;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int warp_row0 = warp * kRowsPerWarp;
  const int row = warp_row0 + lane / 2, half = lane % 2;
  const int64_t key = s0 + row;

  load_rows(k_tile, L.row_pitch, head_of(a.k, a.k_st, b, h), a.k_st[2], s0, kBlockRows, a.S, a.D);
  load_rows(v_tile, L.row_pitch, head_of(a.v, a.v_st, b, h), a.v_st[2], s0, kBlockRows, a.S, a.D);
  zero_fill(acc_k, kBlockRows * L.acc_pitch);
  zero_fill(acc_v, kBlockRows * L.acc_pitch);
  const X* const q_head = head_of(a.q, a.q_st, b, h);
  const X* const dout_head = head_of(a.dout, a.o_st, b, h);
  const float* const lse_head = a.lse + bh * a.T;
  const float* const delta_head = a.delta + bh * a.T;
  const float* const score_row = scores + row * L.score_pitch;
  const float* const dprob_row = dprobs + row * L.score_pitch;
  X* const prob_row = probs + row * L.prob_pitch;
  X* const dscore_row = dscores + row * L.prob_pitch;

  // Causal: queries before this tile's first key see none of its keys.
  for (int64_t t0 = a.causal ? s0 : 0; t0 < a.T; t0 += kQueryStep) {
    __syncthreads();  // every warp is done with the previous q/gout/lse/delta tiles (and k, v, accs are filled)
    load_rows(q_tile, L.row_pitch, q_head, a.q_st[2], t0, kQueryStep, a.T, a.D);
    load_rows(dout_tile, L.row_pitch, dout_head, a.o_st[2], t0, kQueryStep, a.T, a.D);
    for (int i = threadIdx.x; i < kQueryStep; i += blockDim.x) {
      const bool in = t0 + i < a.T;
      lse_tile[i] = in ? lse_head[t0 + i] : 0.f;
      delta_tile[i] = in ? delta_head[t0 + i] : 0.f;
    }
    __syncthreads();
    warp_product_abt(k_tile + warp_row0 * L.row_pitch, L.row_pitch, q_tile, L.row_pitch,
                     scores + warp_row0 * L.score_pitch, L.score_pitch, kQueryStep, a.D);
    warp_product_abt(v_tile + warp_row0 * L.row_pitch, L.row_pitch, dout_tile, L.row_pitch,
                     dprobs + warp_row0 * L.score_pitch, L.score_pitch, kQueryStep, a.D);
    __syncwarp();
    for (int c = half; c < kQueryStep; c += 2) {
      const int64_t t = t0 + c;
      float p = 0.f, ds = 0.f;
      if (key < a.S && t < a.T && (!a.causal || key <= t)) {
        p = expf(fmaf(score_row[c], a.scale, -lse_tile[c]));
        ds = p * (dprob_row[c] - delta_tile[c]) * a.scale;
      }
      prob_row[c] = round_to<X>(p);     // the 16-bit operand of P^T gout
      dscore_row[c] = round_to<X>(ds);  // the 16-bit operand of dS^T q
    }
    __syncwarp();
    warp_accumulate_ab(probs + warp_row0 * L.prob_pitch, L.prob_pitch, dout_tile, L.row_pitch,
                       acc_v + warp_row0 * L.acc_pitch, L.acc_pitch, a.D, kQueryStep);
    warp_accumulate_ab(dscores + warp_row0 * L.prob_pitch, L.prob_pitch, q_tile, L.row_pitch,
                       acc_k + warp_row0 * L.acc_pitch, L.acc_pitch, a.D, kQueryStep);
  }
  __syncthreads();  // the accumulators are complete (and zero-filled by all threads when no query step ran)
  if (key < a.S) {
    store_row(head_of(a.dk, a.k_st, b, h) + key * a.k_st[2], acc_k + row * L.acc_pitch, 1.f, a.D, half);
    store_row(head_of(a.dv, a.v_st, b, h) + key * a.v_st[2], acc_v + row * L.acc_pitch, 1.f, a.D, half);
  }
#endif
}

// ---- host side
bool shape_supported(const AttentionParams& p) {
  return p.D == p.Dv && p.D > 0 && p.D % kFrag == 0 && p.D <= kFlashMaxHeadDim;
}

// Every row of the view starts on a 16-byte boundary (the kernels move rows as 16-byte vectors).
bool rows_aligned(const Tensor& t, const int64_t (&st)[3]) {
  return aligned16(t.raw_data()) && st[0] % kVectorElems == 0 && st[1] % kVectorElems == 0 &&
         st[2] % kVectorElems == 0;
}

// A 1-D grid: blockIdx.x reaches 2^31 - 1.
constexpr int64_t kMaxBlocks = (int64_t{1} << 31) - 1;

int64_t tiles_of(int64_t rows) { return (rows + kBlockRows - 1) / kBlockRows; }

// Whether `device` runs these kernels with `bytes` of dynamic shared memory per block: compute
// capability 8.0+ (bf16 WMMA; the cubins built are sm_80 and sm_90) and an opt-in per-block limit that
// holds the tiles (227 KB on sm_90, 163 KB on sm_80, 99 KB on sm_86/sm_89).
bool device_fits(int device, size_t bytes) {
  int major = 0, optin = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "flash attention: device query");
  check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
        "flash attention: device query");
  return major >= 8 && bytes <= static_cast<size_t>(optin);
}

// Dynamic shared memory above 48 KB must be allowed per kernel (cudaFuncSetAttribute): done once per
// kernel and device, with the most that kernel ever asks for (its D = 128 tiles) within the device's
// limit, since the attribute belongs to the kernel in each device's context.
void allow_shared_memory(const void* kernel, int device, size_t most_bytes, const char* what) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> done;
  const std::lock_guard<std::mutex> lock(mutex);
  if (done.count({kernel, device})) return;
  int optin = 0;
  check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), what);
  const int bytes = static_cast<int>(std::min(most_bytes, static_cast<size_t>(optin)));
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), what);
  done.insert({kernel, device});
}

template <typename X>
FlashArgs<X> args_of(const AttentionParams& p) {
  FlashArgs<X> a;
  a.heads = p.heads;
  a.T = p.T;
  a.S = p.S;
  a.D = static_cast<int>(p.D);
  for (int i = 0; i < 3; ++i) {
    a.q_st[i] = p.q_strides[i];
    a.k_st[i] = p.k_strides[i];
    a.v_st[i] = p.v_strides[i];
    a.o_st[i] = p.o_strides[i];
  }
  a.scale = static_cast<float>(p.scale);  // the fp32 scale the CPU kernel applies
  a.causal = p.causal;
  return a;
}

template <typename X>
bool flash_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   const AttentionParams& p) {
  if (!shape_supported(p) || !rows_aligned(q, p.q_strides) || !rows_aligned(k, p.k_strides) ||
      !rows_aligned(v, p.v_strides) || !rows_aligned(out, p.o_strides))
    return false;
  const int64_t tiles = tiles_of(p.T), blocks = p.batch * p.heads * tiles;
  if (blocks > kMaxBlocks) return false;
  if (blocks == 0) return true;  // no query: nothing to write
  const int device = q.device().index;
  const size_t bytes = ForwardLayout(static_cast<int>(p.D)).bytes;
  if (!device_fits(device, bytes)) return false;

  FlashArgs<X> a = args_of<X>(p);
  a.q = static_cast<const X*>(q.raw_data());
  a.k = static_cast<const X*>(k.raw_data());
  a.v = static_cast<const X*>(v.raw_data());
  a.out = static_cast<X*>(out.raw_data());
  a.lse_out = static_cast<float*>(lse.raw_data());
  a.tiles = tiles;
  DeviceGuard guard(q.device());
  const char* what = "scaled_dot_product_attention (flash)";
  allow_shared_memory(reinterpret_cast<const void*>(&flash_attention_fwd_kernel<X>), device,
                      ForwardLayout(kFlashMaxHeadDim).bytes, what);
  flash_attention_fwd_kernel<X> MT_LAUNCH(static_cast<unsigned>(blocks), kFlashThreads, bytes, stream_of(q))(a);
  check_launch(what);
  return true;
}

template <typename X>
bool flash_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& gout, const Tensor& lse,
                    const Tensor& gq, const Tensor& gk, const Tensor& gv, const AttentionParams& p) {
  if (!shape_supported(p) || !rows_aligned(q, p.q_strides) || !rows_aligned(k, p.k_strides) ||
      !rows_aligned(v, p.v_strides) || !rows_aligned(gout, p.o_strides) || !rows_aligned(gq, p.q_strides) ||
      !rows_aligned(gk, p.k_strides) || !rows_aligned(gv, p.v_strides))
    return false;
  const int64_t heads = p.batch * p.heads, query_tiles = tiles_of(p.T), key_tiles = tiles_of(p.S);
  const int64_t query_blocks = heads * query_tiles, key_blocks = heads * key_tiles;
  if (query_blocks > kMaxBlocks || key_blocks > kMaxBlocks) return false;
  if (query_blocks == 0 && key_blocks == 0) return true;  // no query and no key: nothing to write
  const Device dev = q.device();
  const int device = dev.index;
  const int D = static_cast<int>(p.D);
  const size_t dq_bytes = GradQueryLayout(D).bytes, dkv_bytes = GradKeyLayout(D).bytes;
  if (!device_fits(device, std::max(dq_bytes, dkv_bytes))) return false;

  FlashArgs<X> a = args_of<X>(p);
  a.q = static_cast<const X*>(q.raw_data());
  a.k = static_cast<const X*>(k.raw_data());
  a.v = static_cast<const X*>(v.raw_data());
  a.dout = static_cast<const X*>(gout.raw_data());
  a.dq = static_cast<X*>(gq.raw_data());
  a.dk = static_cast<X*>(gk.raw_data());
  a.dv = static_cast<X*>(gv.raw_data());
  a.lse = static_cast<const float*>(lse.raw_data());
  // delta per query, from the gq kernel to the gk/gv kernel (stream-ordered: freed after both are queued).
  DeviceScratch delta(dev, sizeof(float) * static_cast<size_t>(std::max<int64_t>(heads * p.T, 1)));
  a.delta = delta.as<float>();
  DeviceGuard guard(dev);
  const cudaStream_t stream = stream_of(q);
  const char* what = "scaled_dot_product_attention backward (flash)";
  // gq first: it writes delta, which the gk/gv kernel reads (same stream, in order). With S == 0 it
  // writes gq = 0; with T == 0 it does not run and gk/gv are zeros.
  if (query_blocks > 0) {
    allow_shared_memory(reinterpret_cast<const void*>(&flash_attention_dq_kernel<X>), device,
                        GradQueryLayout(kFlashMaxHeadDim).bytes, what);
    a.tiles = query_tiles;
    flash_attention_dq_kernel<X> MT_LAUNCH(static_cast<unsigned>(query_blocks), kFlashThreads, dq_bytes, stream)(a);
    check_launch(what);
  }
  if (key_blocks > 0) {
    allow_shared_memory(reinterpret_cast<const void*>(&flash_attention_dkv_kernel<X>), device,
                        GradKeyLayout(kFlashMaxHeadDim).bytes, what);
    a.tiles = key_tiles;
    flash_attention_dkv_kernel<X> MT_LAUNCH(static_cast<unsigned>(key_blocks), kFlashThreads, dkv_bytes, stream)(a);
    check_launch(what);
  }
  return true;
}

}  // namespace

bool try_flash_attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                             const AttentionParams& p) {
  switch (q.dtype()) {
    case kBFloat16: return flash_forward<__nv_bfloat16>(q, k, v, out, lse, p);
    case kFloat16: return flash_forward<__half>(q, k, v, out, lse, p);
    default: return false;
  }
}

bool try_flash_attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& gout, const Tensor& lse,
                             const Tensor& gq, const Tensor& gk, const Tensor& gv, const AttentionParams& p) {
  switch (q.dtype()) {
    case kBFloat16: return flash_backward<__nv_bfloat16>(q, k, v, gout, lse, gq, gk, gv, p);
    case kFloat16: return flash_backward<__half>(q, k, v, gout, lse, gq, gk, gv, p);
    default: return false;
  }
}

}  // namespace mixtrain::kernels::cuda
