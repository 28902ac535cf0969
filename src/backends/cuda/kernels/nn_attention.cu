// CUDA fused attention (kernels/nn.h's attention_fwd / attention_bwd): out = softmax(scale q k^T
// [causal]) v per (batch, head) without materialising the [T, S] probabilities, memory O(T) per
// head (the log-sum-exp per query, as FlashAttention saves for the backward).
//
// One warp per query row (forward, dq) or key row (dk, dv); each lane holds D/32 features in
// registers; scores are fp32 dot products reduced across the warp, the softmax is online (running
// max and sum). The backward recomputes P = exp(scale s - lse) and runs three passes (delta, dq,
// dk/dv), each output written by exactly one warp: deterministic, no atomics. Head dims up to 256.
//
// Dispatch: bf16 and fp16 calls go to the tensor-core kernels of attention_flash.cu whenever they
// take the shape (D == Dv, a multiple of 16 up to 128, rows 16-byte aligned, a GPU of compute
// capability 8.0+ with room for the tiles); these warp-per-row kernels run everything else: fp32,
// fp64 and the 16-bit shapes the tensor-core kernels decline.
#include <cmath>

#include "backends/cuda/kernels/attention_flash.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/register.h"
#include "kernels/nn.h"

namespace mixtrain::kernels::cuda {
namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kPerLane = kMaxHeadDim / 32;
constexpr int kWarpsPerBlock = 4;

struct Heads {
  int64_t B, H, T, S, D, Dv;
  int64_t qs[3], ks[3], vs[3], os[3];
};

template <typename X>
__device__ __forceinline__ const X* row(const X* base, const int64_t st[3], int64_t b, int64_t h, int64_t t) {
  return base + b * st[0] + h * st[1] + t * st[2];
}

// Loads features lane, lane + 32, ... of a row into registers (0 past n).
template <typename X, typename C>
__device__ __forceinline__ void load_row(const X* r, int64_t n, C (&out)[kPerLane]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t f = lane + 32 * i;
    out[i] = f < n ? static_cast<C>(load(r + f)) : C(0);
  }
}

template <typename C>
__device__ __forceinline__ C dot(const C (&a)[kPerLane], const C (&b)[kPerLane]) {
  C s = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) s += a[i] * b[i];
  return warp_sum(s);
}

__device__ __forceinline__ int64_t keys_for(const Heads& g, bool causal, int64_t t) {
  return causal ? min(g.S, t + 1) : g.S;
}

template <typename X, typename C>
__global__ void attention_fwd_kernel(const X* q, const X* k, const X* v, X* out, C* lse, Heads g, C scale, bool causal) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (w >= g.B * g.H * g.T) return;
  const int64_t t = w % g.T, bh = w / g.T, h = bh % g.H, b = bh / g.H;
  const int lane = threadIdx.x & 31;
  C qr[kPerLane], kr[kPerLane], vr[kPerLane], acc[kPerLane];
  load_row(row(q, g.qs, b, h, t), g.D, qr);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0;
  const int64_t len = keys_for(g, causal, t);
  C m = -static_cast<C>(INFINITY), z = 0;
  for (int64_t s = 0; s < len; ++s) {
    load_row(row(k, g.ks, b, h, s), g.D, kr);
    const C x = dot(qr, kr) * scale;
    const C m_new = x > m ? x : m;
    const C correction = exp(m - m_new), e = exp(x - m_new);
    z = z * correction + e;
    load_row(row(v, g.vs, b, h, s), g.Dv, vr);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[i] = acc[i] * correction + e * vr[i];
    m = m_new;
  }
  X* o = const_cast<X*>(row(static_cast<const X*>(out), g.os, b, h, t));
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t f = lane + 32 * i;
    if (f < g.Dv) o[f] = round_to<X>(len > 0 ? acc[i] / z : C(0));
  }
  if (lane == 0) lse[w] = len > 0 ? m + log(z) : -static_cast<C>(INFINITY);
}

// delta[t] = sum_s P[t, s] dP[t, s], dP = gout v^T (the softmax backward's row sum).
template <typename X, typename C>
__global__ void attention_delta_kernel(const X* q, const X* k, const X* v, const X* gout, const C* lse, C* delta,
                                       Heads g, C scale, bool causal) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (w >= g.B * g.H * g.T) return;
  const int64_t t = w % g.T, bh = w / g.T, h = bh % g.H, b = bh / g.H;
  C qr[kPerLane], gr[kPerLane], kr[kPerLane], vr[kPerLane];
  load_row(row(q, g.qs, b, h, t), g.D, qr);
  load_row(row(gout, g.os, b, h, t), g.Dv, gr);
  const int64_t len = keys_for(g, causal, t);
  C d = 0;
  for (int64_t s = 0; s < len; ++s) {
    load_row(row(k, g.ks, b, h, s), g.D, kr);
    load_row(row(v, g.vs, b, h, s), g.Dv, vr);
    d += exp(dot(qr, kr) * scale - lse[w]) * dot(gr, vr);
  }
  if ((threadIdx.x & 31) == 0) delta[w] = d;
}

// gq[t] = scale * sum_s P (dP - delta[t]) k[s].
template <typename X, typename C>
__global__ void attention_dq_kernel(const X* q, const X* k, const X* v, const X* gout, const C* lse, const C* delta,
                                    X* gq, Heads g, C scale, bool causal) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (w >= g.B * g.H * g.T) return;
  const int64_t t = w % g.T, bh = w / g.T, h = bh % g.H, b = bh / g.H;
  const int lane = threadIdx.x & 31;
  C qr[kPerLane], gr[kPerLane], kr[kPerLane], vr[kPerLane], acc[kPerLane];
  load_row(row(q, g.qs, b, h, t), g.D, qr);
  load_row(row(gout, g.os, b, h, t), g.Dv, gr);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0;
  const int64_t len = keys_for(g, causal, t);
  for (int64_t s = 0; s < len; ++s) {
    load_row(row(k, g.ks, b, h, s), g.D, kr);
    load_row(row(v, g.vs, b, h, s), g.Dv, vr);
    const C p = exp(dot(qr, kr) * scale - lse[w]);
    const C ds = p * (dot(gr, vr) - delta[w]) * scale;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[i] += ds * kr[i];
  }
  X* o = const_cast<X*>(row(static_cast<const X*>(gq), g.qs, b, h, t));
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t f = lane + 32 * i;
    if (f < g.D) o[f] = round_to<X>(acc[i]);
  }
}

// gk[s] = scale * sum_t P (dP - delta[t]) q[t];  gv[s] = sum_t P gout[t]  (queries that see key s).
template <typename X, typename C>
__global__ void attention_dkv_kernel(const X* q, const X* k, const X* v, const X* gout, const C* lse, const C* delta,
                                     X* gk, X* gv, Heads g, C scale, bool causal) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (w >= g.B * g.H * g.S) return;
  const int64_t s = w % g.S, bh = w / g.S, h = bh % g.H, b = bh / g.H;
  const int lane = threadIdx.x & 31;
  C kr[kPerLane], vr[kPerLane], qr[kPerLane], gr[kPerLane], ak[kPerLane], av[kPerLane];
  load_row(row(k, g.ks, b, h, s), g.D, kr);
  load_row(row(v, g.vs, b, h, s), g.Dv, vr);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) ak[i] = av[i] = 0;
  for (int64_t t = causal ? s : 0; t < g.T; ++t) {
    const int64_t qi = bh * g.T + t;
    load_row(row(q, g.qs, b, h, t), g.D, qr);
    load_row(row(gout, g.os, b, h, t), g.Dv, gr);
    const C p = exp(dot(qr, kr) * scale - lse[qi]);
    const C ds = p * (dot(gr, vr) - delta[qi]) * scale;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      ak[i] += ds * qr[i];
      av[i] += p * gr[i];
    }
  }
  X* ok = const_cast<X*>(row(static_cast<const X*>(gk), g.ks, b, h, s));
  X* ov = const_cast<X*>(row(static_cast<const X*>(gv), g.vs, b, h, s));
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t f = lane + 32 * i;
    if (f < g.D) ok[f] = round_to<X>(ak[i]);
    if (f < g.Dv) ov[f] = round_to<X>(av[i]);
  }
}

Heads heads_of(const AttentionParams& p) {
  MT_CHECK(p.D <= kMaxHeadDim && p.Dv <= kMaxHeadDim, "scaled_dot_product_attention: head dims up to ", kMaxHeadDim,
           " run on cuda, got ", p.D, " and ", p.Dv);
  Heads g{p.batch, p.heads, p.T, p.S, p.D, p.Dv, {}, {}, {}, {}};
  for (int i = 0; i < 3; ++i) {
    g.qs[i] = p.q_strides[i];
    g.ks[i] = p.k_strides[i];
    g.vs[i] = p.v_strides[i];
    g.os[i] = p.o_strides[i];
  }
  return g;
}

unsigned blocks_for(int64_t warps) { return static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock); }

template <typename T>
struct AttentionFwd {
  static void run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                  const AttentionParams& p) {
    using X = dev_t<T>;
    using C = opmath_t<X>;
    if constexpr (is_half_v<X>) {
      if (try_flash_attention_fwd(q, k, v, out, lse, p)) return;
    }
    const Heads g = heads_of(p);
    if (g.B * g.H * g.T == 0) return;
    DeviceGuard guard(q.device());
    attention_fwd_kernel<X, C> MT_LAUNCH(blocks_for(g.B * g.H * g.T), 32 * kWarpsPerBlock, 0, stream_of(q))(
        static_cast<const X*>(q.raw_data()), static_cast<const X*>(k.raw_data()), static_cast<const X*>(v.raw_data()),
        static_cast<X*>(out.raw_data()), static_cast<C*>(lse.raw_data()), g, static_cast<C>(p.scale), p.causal);
    check_launch("scaled_dot_product_attention");
  }
};

template <typename T>
struct AttentionBwd {
  static void run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& gout, const Tensor& lse,
                  const Tensor& gq, const Tensor& gk, const Tensor& gv, const AttentionParams& p) {
    using X = dev_t<T>;
    using C = opmath_t<X>;
    if constexpr (is_half_v<X>) {
      if (try_flash_attention_bwd(q, k, v, gout, lse, gq, gk, gv, p)) return;
    }
    const Heads g = heads_of(p);
    const Device device = q.device();
    const auto* qp = static_cast<const X*>(q.raw_data());
    const auto* kp = static_cast<const X*>(k.raw_data());
    const auto* vp = static_cast<const X*>(v.raw_data());
    const auto* gp = static_cast<const X*>(gout.raw_data());
    const auto* lp = static_cast<const C*>(lse.raw_data());
    const C scale = static_cast<C>(p.scale);
    const int64_t queries = g.B * g.H * g.T, keys = g.B * g.H * g.S;
    DeviceScratch delta(device, sizeof(C) * static_cast<size_t>(std::max<int64_t>(queries, 1)));
    DeviceGuard guard(device);
    const cudaStream_t s = stream_of(q);
    if (queries > 0) {
      attention_delta_kernel<X, C> MT_LAUNCH(blocks_for(queries), 32 * kWarpsPerBlock, 0, s)(qp, kp, vp, gp, lp,
                                                                                        delta.as<C>(), g, scale, p.causal);
      check_launch("scaled_dot_product_attention backward");
      attention_dq_kernel<X, C> MT_LAUNCH(blocks_for(queries), 32 * kWarpsPerBlock, 0, s)(
          qp, kp, vp, gp, lp, delta.as<C>(), static_cast<X*>(gq.raw_data()), g, scale, p.causal);
      check_launch("scaled_dot_product_attention backward");
    }
    if (keys > 0) {
      attention_dkv_kernel<X, C> MT_LAUNCH(blocks_for(keys), 32 * kWarpsPerBlock, 0, s)(
          qp, kp, vp, gp, lp, delta.as<C>(), static_cast<X*>(gk.raw_data()), static_cast<X*>(gv.raw_data()), g, scale,
          p.causal);
      check_launch("scaled_dot_product_attention backward");
    }
  }
};

}  // namespace

void register_cuda_attention(const Registry& r) {
  r.floating<AttentionFwd>(attention_fwd);
  r.floating<AttentionBwd>(attention_bwd);
}

}  // namespace mixtrain::kernels::cuda
