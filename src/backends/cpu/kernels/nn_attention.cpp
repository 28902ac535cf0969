// CPU fused attention, forward and backward (the kernels behind scaled_dot_product_attention and
// qkv_attention; tables in src/kernels/nn.h).
//
// Accumulation: fp32 (fp64 for fp64 input). Per (batch, head) 16-bit k and v rows are widened once
// to fp32 scratch, fp32 rows are read where they are (the products take any row stride); k^T (and
// v^T for the backward) is built once, then queries are processed in blocks of kQueryBlock rows:
//   forward:  S = q k^T;  P = softmax(scale * S) per row (causal: keys s <= t only; the rest 0);
//             out = P v, rounded once; lse = max + log(sum) saved per query.
//   backward: P = exp(scale * S - lse) recomputed;  dP = dout v^T;  dS = scale * P * (dP - rowsum(P dP));
//             dq = dS k;  dk += dS^T q;  dv += P^T dout (fp32 across query blocks, in the
//             gradients themselves for fp32, in scratch rounded once for 16-bit).
// Scores and probabilities never leave per-thread scratch ([kQueryBlock, S] floats) and are never
// rounded to 16 bits, so 16-bit inputs get one rounding, on the output. Causal blocks skip the
// tiles above the diagonal. One thread owns a (batch, head) from start to end and sums in a fixed
// order, so results do not depend on the thread count.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/prefetch.h"
#include "backends/cpu/kernels/attention_gemm.h"
#include "backends/cpu/kernels/nn_vec.h"
#include "kernels/nn.h"
#include "backends/cpu/kernels/host_ptr.h"
#include "backends/cpu/kernels/register.h"

namespace mixtrain::kernels {


namespace {

using attn::Band;
using attn::kOff;

// Query rows per block: a [64, S] fp32 score block stays in L2 for S up to a few thousand.
constexpr int64_t kQueryBlock = 64;

// Consecutive blocks of the given sizes in one per-thread scratch row (nnvec::scratch's slot 0;
// nothing the kernels call uses nnvec::scratch while the blocks are live).
template <typename F, size_t N>
std::array<F*, N> scratch_blocks(const std::array<int64_t, N>& sizes) {
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  std::array<F*, N> blocks;
  F* next = nnvec::scratch<F>(0, total);
  for (size_t i = 0; i < N; ++i) {
    blocks[i] = next;
    next += sizes[i];
  }
  return blocks;
}

// Base pointer of (b, h) in a tensor with (batch, head, time) strides st.
template <typename T>
T* head_ptr(const Tensor& t, const int64_t* st, int64_t b, int64_t h) {
  return host_ptr<T>(t) + b * st[0] + h * st[1];
}

// (batch, head) pairs per parallel task: at least ~2^18 multiply-adds each, so that tiny problems
// (gradient checks, short sequences) do not pay for a parallel region.
inline int64_t head_grain(const AttentionParams& p) {
  const int64_t work = std::max<int64_t>(1, p.T * p.S * (p.D + p.Dv));
  return std::max<int64_t>(1, (int64_t{1} << 18) / work);
}

// Keys query t (0-based) attends to.
inline int64_t keys_for(const AttentionParams& p, int64_t t) { return p.causal ? std::min(p.S, t + 1) : p.S; }

// The length to which a row of `len` scores (of s_eff in the block) is processed. The row
// primitives (nnvec) run whole vectors and then finish a ragged end one element at a time, which
// on causal rows (1 to S long) cost more than the vectors did. So a row is processed in whole
// 16-float blocks where the block has room, its extra entries set to add nothing: -inf before the
// exp (whose result is then 0), 0 in the gradient.
inline int64_t padded_row(int64_t len, int64_t s_eff) { return std::min(s_eff, (len + 15) / 16 * 16); }

// Rows of one head as the products read them: a pointer and its row stride.
template <typename F>
struct Rows {
  const F* p;
  int64_t ld;
};

// `rows` rows of n values, st apart, as F rows. fp32 (and fp64) rows are read where they are: the
// products take any row stride, so copying them would only add a pass. They are asked into the
// cache first, since the hardware prefetchers do not follow a stride of a whole [B, T, 3C] row.
// 16-bit rows are widened into `scratch` (rows x n).
template <typename F, typename T>
Rows<F> rows_of(const T* src, int64_t st, int64_t rows, int64_t n, F* scratch) {
  if constexpr (std::is_same_v<T, F>) {
    for (int64_t r = 0; r < rows; ++r) detail::prefetch_bytes(src + r * st, n * static_cast<int64_t>(sizeof(F)));
    return {src, st};
  } else {
    nnvec::load_rows(src, st, rows, n, scratch);
    return {scratch, n};
  }
}

// k^T or v^T [n, rows] of a head, for the products that need the other orientation: transposed
// straight from the strided rows for fp32, widened into `scratch` first for 16-bit rows.
template <typename F, typename T>
void transposed_rows(const T* src, int64_t st, int64_t rows, int64_t n, F* scratch, F* out) {
  const Rows<F> r = rows_of<F>(src, st, rows, n, scratch);
  attn::transpose(r.p, r.ld, rows, n, out);
}

// 1 where rows of T go through F scratch (16-bit rows are widened there, products on 16-bit outputs
// write there), 0 where they are read and written in place (fp32, fp64): the scratch blocks that
// only the 16-bit path uses get no room then.
template <typename T, typename F>
constexpr int64_t widened_rows() {
  return std::is_same_v<T, F> ? 0 : 1;
}

// Where a product writes `rows` output rows of n values: straight into dst (row stride st) for
// fp32, else into `scratch`, rounded into dst afterwards by finish_rows.
template <typename F>
struct OutRows {
  F* p;
  int64_t ld;
};
template <typename F, typename T>
OutRows<F> out_rows(T* dst, int64_t st, int64_t n, F* scratch) {
  if constexpr (std::is_same_v<T, F>) {
    return {dst, st};
  } else {
    return {scratch, n};
  }
}
template <typename F, typename T>
void finish_rows(const OutRows<F>& o, int64_t rows, int64_t n, T* dst, int64_t st) {
  if constexpr (!std::is_same_v<T, F>) nnvec::store_rows(o.p, rows, n, dst, st);
}

template <typename T>
struct AttentionFwd {
  static void run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                  const AttentionParams& p) {
    using F = opmath_t<T>;
    const int64_t T_ = p.T, S = p.S, D = p.D, Dv = p.Dv, Bq = std::min(kQueryBlock, T_);
    if (p.batch * p.heads == 0 || T_ == 0) return;
    F* lse_all = host_ptr<F>(lse);
    const F scale = static_cast<F>(p.scale);
    parallel_for(p.batch * p.heads, head_grain(p), [&](int64_t begin, int64_t end) {
      const int64_t w = widened_rows<T, F>();  // Ks, Vs, Qb, Ob: 16-bit inputs only
      const auto [Kt, Ks, Vs, Qb, Sb, Ob] =
          scratch_blocks<F, 6>({D * S, w * S * D, w * S * Dv, w * Bq * D, Bq * S, w * Bq * Dv});
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t b = bh / p.heads, h = bh % p.heads;
        const T* qp = head_ptr<T>(q, p.q_strides, b, h);
        T* op = head_ptr<T>(out, p.o_strides, b, h);
        const int64_t qs = p.q_strides[2], os = p.o_strides[2];
        F* lse_row = lse_all + bh * T_;
        transposed_rows(head_ptr<T>(k, p.k_strides, b, h), p.k_strides[2], S, D, Ks, Kt);
        const Rows<F> vr = rows_of(head_ptr<T>(v, p.v_strides, b, h), p.v_strides[2], S, Dv, Vs);
        for (int64_t t0 = 0; t0 < T_; t0 += Bq) {
          const int64_t rows = std::min(Bq, T_ - t0);
          const int64_t s_eff = p.causal ? std::min(S, t0 + rows) : S;  // keys any row of the block sees
          const Rows<F> qr = rows_of(qp + t0 * qs, qs, rows, D, Qb);
          attn::gemm(rows, s_eff, D, qr.p, qr.ld, 1, Kt, S, Sb, s_eff, false, Band{.n_hi = p.causal ? t0 : kOff});
          for (int64_t i = 0; i < rows; ++i) {
            F* row = Sb + i * s_eff;
            const int64_t len = keys_for(p, t0 + i);
            if (len == 0) {
              lse_row[t0 + i] = -std::numeric_limits<F>::infinity();
              continue;
            }
            const int64_t n = padded_row(len, s_eff);
            nnvec::affine(row, scale, F(0), row, n);
            std::fill(row + len, row + n, -std::numeric_limits<F>::infinity());
            const F m = nnvec::max(row, n);
            const F z = nnvec::exp_sum(row, m, row, n);
            nnvec::affine(row, F(1) / z, F(0), row, n);
            std::fill(row + n, row + s_eff, F(0));
            lse_row[t0 + i] = m + std::log(z);
          }
          const OutRows<F> o = out_rows(op + t0 * os, os, Dv, Ob);
          attn::gemm(rows, Dv, s_eff, Sb, s_eff, 1, vr.p, vr.ld, o.p, o.ld, false, Band{.k_hi = p.causal ? t0 : kOff});
          finish_rows(o, rows, Dv, op + t0 * os, os);
        }
      }
    });
  }
};

template <typename T>
struct AttentionBwd {
  static void run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& gout, const Tensor& lse,
                  const Tensor& gq, const Tensor& gk, const Tensor& gv, const AttentionParams& p) {
    using F = opmath_t<T>;
    const int64_t T_ = p.T, S = p.S, D = p.D, Dv = p.Dv, Bq = std::max<int64_t>(1, std::min(kQueryBlock, T_));
    if (p.batch * p.heads == 0) return;
    const F* lse_all = host_ptr<F>(lse);
    const F scale = static_cast<F>(p.scale);
    parallel_for(p.batch * p.heads, head_grain(p), [&](int64_t begin, int64_t end) {
      const int64_t w = widened_rows<T, F>();  // Ks, Vs, dK, dV, Qb, dQb, dOb: 16-bit inputs only
      const auto [Ks, Kt, Vs, Vt, dK, dV, Qb, dQb, dOb, Pb, dSb] = scratch_blocks<F, 11>(
          {w * S * D, S * D, w * S * Dv, S * Dv, w * S * D, w * S * Dv, w * Bq * D, w * Bq * D, w * Bq * Dv, Bq * S,
           Bq * S});
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t b = bh / p.heads, h = bh % p.heads;
        const T* qp = head_ptr<T>(q, p.q_strides, b, h);
        const T* gop = head_ptr<T>(gout, p.o_strides, b, h);
        T* gqp = head_ptr<T>(gq, p.q_strides, b, h);
        const int64_t qs = p.q_strides[2], os = p.o_strides[2];
        const F* lse_row = lse_all + bh * T_;
        const Rows<F> kr = rows_of(head_ptr<T>(k, p.k_strides, b, h), p.k_strides[2], S, D, Ks);
        attn::transpose(kr.p, kr.ld, S, D, Kt);
        transposed_rows(head_ptr<T>(v, p.v_strides, b, h), p.v_strides[2], S, Dv, Vs, Vt);
        T* gkp = head_ptr<T>(gk, p.k_strides, b, h);
        T* gvp = head_ptr<T>(gv, p.v_strides, b, h);
        const int64_t ks = p.k_strides[2], vs = p.v_strides[2];
        // dk and dv sum over query blocks straight in the gradients (fp32), else in scratch.
        const OutRows<F> dk = out_rows(gkp, ks, D, dK), dv = out_rows(gvp, vs, Dv, dV);
        int64_t keys_done = 0;  // key rows [0, keys_done) hold sums from earlier query blocks
        for (int64_t t0 = 0; t0 < T_; t0 += Bq) {
          const int64_t rows = std::min(Bq, T_ - t0);
          const int64_t s_eff = p.causal ? std::min(S, t0 + rows) : S;
          const Rows<F> qr = rows_of(qp + t0 * qs, qs, rows, D, Qb);
          const Rows<F> gor = rows_of(gop + t0 * os, os, rows, Dv, dOb);
          const Band cols{.n_hi = p.causal ? t0 : kOff};
          attn::gemm(rows, s_eff, D, qr.p, qr.ld, 1, Kt, S, Pb, s_eff, false, cols);     // scores
          attn::gemm(rows, s_eff, Dv, gor.p, gor.ld, 1, Vt, S, dSb, s_eff, false, cols);  // dP
          for (int64_t i = 0; i < rows; ++i) {
            F* pr = Pb + i * s_eff;
            F* dr = dSb + i * s_eff;
            const int64_t len = keys_for(p, t0 + i);
            const int64_t n = padded_row(len, s_eff);
            nnvec::affine(pr, scale, -lse_row[t0 + i], pr, n);
            std::fill(pr + len, pr + n, -std::numeric_limits<F>::infinity());
            std::fill(dr + len, dr + n, F(0));
            nnvec::exp_sum(pr, F(0), pr, n);
            const F delta = nnvec::dot(pr, dr, n);
            nnvec::softmax_bwd(pr, dr, delta, scale, dr, n);
            std::fill(pr + n, pr + s_eff, F(0));
            std::fill(dr + n, dr + s_eff, F(0));
          }
          const OutRows<F> dq = out_rows(gqp + t0 * qs, qs, D, dQb);
          attn::gemm(rows, D, s_eff, dSb, s_eff, 1, kr.p, kr.ld, dq.p, dq.ld, false, Band{.k_hi = p.causal ? t0 : kOff});
          finish_rows(dq, rows, D, gqp + t0 * qs, qs);
          // Key row j collects query rows i with t0 + i >= j: added to the rows earlier blocks
          // wrote, written afresh for the rest (the same sums as adding to zeros).
          const int64_t seen = std::min(keys_done, s_eff);
          for (const auto& [j0, j1, add] : {std::tuple{int64_t{0}, seen, true}, std::tuple{seen, s_eff, false}}) {
            if (j1 <= j0) continue;
            const Band keys{.k_lo = p.causal ? j0 - t0 : kOff};
            attn::gemm(j1 - j0, D, rows, dSb + j0, 1, s_eff, qr.p, qr.ld, dk.p + j0 * dk.ld, dk.ld, add, keys);
            attn::gemm(j1 - j0, Dv, rows, Pb + j0, 1, s_eff, gor.p, gor.ld, dv.p + j0 * dv.ld, dv.ld, add, keys);
          }
          keys_done = std::max(keys_done, s_eff);
        }
        // Keys no query sees (causal with S > T, or T == 0) get zero gradients.
        for (int64_t j = keys_done; j < S; ++j) {
          std::fill(dk.p + j * dk.ld, dk.p + j * dk.ld + D, F(0));
          std::fill(dv.p + j * dv.ld, dv.p + j * dv.ld + Dv, F(0));
        }
        finish_rows(dk, S, D, gkp, ks);
        finish_rows(dv, S, Dv, gvp, vs);
      }
    });
  }
};

}  // namespace

void register_cpu_attention(const Registry& r) {
  r.floating<AttentionFwd>(attention_fwd);
  r.floating<AttentionBwd>(attention_bwd);
}

}  // namespace mixtrain::kernels
