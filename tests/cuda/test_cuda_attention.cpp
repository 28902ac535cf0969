// The CUDA fused attention (src/backends/cuda/kernels/nn_attention.cu: the warp-per-row kernels for fp32 and fp64
// and the shapes the tensor-core kernels decline; attention_flash.cu: the bf16/fp16 tensor-core
// kernels) against the CPU's (src/backends/cpu/kernels/nn_attention.cpp): out, lse, gq, gk and gv on the same
// inputs, through the kernel tables (for lse and exact control of the layouts) and through the op
// front-ends (scaled_dot_product_attention, qkv_attention, with autograd).
//
// Each element is checked against a bound derived from the numerics (support/tolerances.h,
// AttentionTolerance): a fraction of the magnitude sum M of its terms, which the test computes in fp64
// from the exact probabilities. The tensor-core kernels round P and dS to 16 bits before their products
// (FlashAttention's scheme) and get that rounding's bound on top of fp32 reassociation; every other
// path gets the reassociation bound and one 16-bit ulp for its own output rounding.
//
// Shapes: T == S and T != S both ways (T < S, T > S), T and S not multiples of the 64-row tiles (1, 17,
// 130), S == 0 and T == 0, head dims 16, 64, 128 (taken by the tensor-core kernels) and 40 (declined),
// causal and not; q, k and v as strided views of one packed [B, T, 3, H, D] projection (as the GPT
// reads them), of separate [B, T, H, D] / [B, S, 2, H, D] tensors, and of rows that are not 16-byte
// aligned (declined: the warp kernels run). Outputs and gradients start as NaN, so an element a
// kernel does not write fails. Every test skips, with the driver's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/cuda_test_helpers.h"
#include "kernels/nn.h"
#include "mixtrain/cuda.h"
#include "mixtrain/mixtrain.h"
#include "support/tolerances.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;

namespace {

using mt::testing::AttentionTolerance;
using mt::testing::gpu::bytes_of;
using mt::testing::gpu::kGpu;
using mt::testing::gpu::kHost;

// Inputs are standard normal clamped to [-kInputBound, kInputBound]: the max|x| of the fp16 term bound.
constexpr double kInputBound = 4.0;

// How q, k, v (and out, and the gradients) lie in memory.
enum class Layout {
  kPacked,      // q, k, v from one [B, T, 3, H, D] tensor (T == S), out [B, T, H, D]: the GPT's qkv_attention
  kSeparate,    // q from [B, T, H, D], k and v from one [B, S, 2, H, D]
  kMisaligned,  // as kSeparate with rows 3 (q) / 2 * H * D + 1 (k, v) long, starting one element in:
                // no row starts 16-byte aligned, so the tensor-core kernels decline
};

const char* to_string(Layout l) {
  switch (l) {
    case Layout::kPacked: return "packed qkv";
    case Layout::kSeparate: return "separate q, kv";
    default: return "misaligned rows";
  }
}

struct Case {
  mt::DType dtype;
  int64_t B, H, T, S, D;
  bool causal;
  Layout layout;
  double scale;  // 0: the default 1 / sqrt(D)
};

std::string case_name(const Case& c) {
  return std::string(mt::to_string(c.dtype)) + " B " + std::to_string(c.B) + " H " + std::to_string(c.H) + " T " +
         std::to_string(c.T) + " S " + std::to_string(c.S) + " D " + std::to_string(c.D) +
         (c.causal ? " causal, " : " full, ") + to_string(c.layout);
}

// Whether the tensor-core kernels take the case (attention_flash.h): 16-bit, D a multiple of 16 up to
// 128, aligned rows. (A GPU whose shared memory cannot hold the tiles would run the warp kernels,
// which meet the tighter bound as well.)
bool tensor_cores(const Case& c) {
  return (c.dtype == mt::kBFloat16 || c.dtype == mt::kFloat16) && c.D % 16 == 0 && c.D <= 128 &&
         c.layout != Layout::kMisaligned;
}

// The storage of the inputs (or of their gradients) on one device: `x` holds q (and for kPacked k and
// v), `kv` holds k and v for the other layouts.
struct Storage {
  mt::Tensor x, kv;
};

Storage storage_shaped(const Case& c, mt::Device device, double fill) {
  const int64_t HD = c.H * c.D, pad = c.layout == Layout::kMisaligned ? 1 : 0;
  const mt::TensorOptions o{.dtype = c.dtype, .device = device};
  if (c.layout == Layout::kPacked) return {mt::full({c.B, c.T, 3 * HD}, fill, o), mt::Tensor()};
  return {mt::full({c.B, c.T, HD + pad}, fill, o), mt::full({c.B, c.S, 2 * HD + pad}, fill, o)};
}

// q, k, v as [B, H, T|S, D] views of the storage.
struct Views {
  mt::Tensor q, k, v;
};

Views views_of(const Case& c, const Storage& s) {
  const int64_t HD = c.H * c.D, pad = c.layout == Layout::kMisaligned ? 1 : 0;
  auto heads_first = [](const mt::Tensor& t) { return t.permute({0, 2, 1, 3}); };
  if (c.layout == Layout::kPacked) {
    const mt::Tensor x = s.x.view({c.B, c.T, 3, c.H, c.D});
    return {heads_first(x.select(2, 0)), heads_first(x.select(2, 1)), heads_first(x.select(2, 2))};
  }
  const mt::Tensor q = s.x.narrow(2, pad, HD).view({c.B, c.T, c.H, c.D});
  const mt::Tensor kv = s.kv.narrow(2, pad, 2 * HD).view({c.B, c.S, 2, c.H, c.D});
  return {heads_first(q), heads_first(kv.select(2, 0)), heads_first(kv.select(2, 1))};
}

// out (and gout): [B, T, H, D] storage seen as [B, H, T, D], the layout qkv_attention writes.
mt::Tensor out_view(const mt::Tensor& storage) { return storage.permute({0, 2, 1, 3}); }

void set_strides(int64_t (&st)[3], const mt::Tensor& view) {
  EXPECT_EQ(view.stride(3), 1) << "the feature dim must be contiguous";
  for (int i = 0; i < 3; ++i) st[i] = view.stride(i);
}

mt::kernels::AttentionParams params_of(const Case& c, const Views& in, const mt::Tensor& out) {
  mt::kernels::AttentionParams p;
  p.batch = c.B;
  p.heads = c.H;
  p.T = c.T;
  p.S = c.S;
  p.D = p.Dv = c.D;
  p.scale = c.scale != 0.0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.D));
  p.causal = c.causal;
  set_strides(p.q_strides, in.q);
  set_strides(p.k_strides, in.k);
  set_strides(p.v_strides, in.v);
  set_strides(p.o_strides, out);
  return p;
}

mt::Tensor clamped_randn(const mt::Shape& shape, mt::Generator& g) {
  if (shape.numel() == 0) return mt::zeros(shape);  // T == 0 or S == 0 (randn refuses an empty shape)
  return mt::clamp(mt::randn(shape, {}, &g), -kInputBound, kInputBound);
}

// The inputs, on the host: the storage (random where the views read, the misaligned layouts' extra
// column too) and the output gradient's [B, T, H, D] storage.
struct HostInputs {
  Storage in;
  mt::Tensor gout;
};

HostInputs random_inputs(const Case& c, mt::Generator& g) {
  Storage s = storage_shaped(c, kHost, 0.0);
  s.x = clamped_randn(s.x.shape(), g).to(c.dtype);
  if (s.kv.defined()) s.kv = clamped_randn(s.kv.shape(), g).to(c.dtype);
  return {s, clamped_randn({c.B, c.T, c.H, c.D}, g).to(c.dtype)};
}

// Forward and backward through the kernel tables on `device`: out, lse, gq, gk, gv (the gradients
// as views of their own storage, laid out as the inputs).
struct Results {
  mt::Tensor out, lse, gq, gk, gv;
};

Results run_tables(const Case& c, const HostInputs& host, mt::Device device) {
  const Storage in{host.in.x.to(device), host.in.kv.defined() ? host.in.kv.to(device) : mt::Tensor()};
  const Views v = views_of(c, in);
  const mt::Tensor out = out_view(mt::full({c.B, c.T, c.H, c.D}, NAN, {.dtype = c.dtype, .device = device}));
  const mt::Tensor gout = out_view(host.gout.to(device));
  const mt::kernels::AttentionParams p = params_of(c, v, out);
  const mt::DType stat = c.dtype == mt::kFloat64 ? mt::kFloat64 : mt::kFloat32;
  const mt::Tensor lse = mt::full({c.B, c.H, c.T}, NAN, {.dtype = stat, .device = device});
  mt::kernels::attention_fwd(device, c.dtype)(v.q, v.k, v.v, out, lse, p);
  const Views g = views_of(c, storage_shaped(c, device, NAN));
  mt::kernels::attention_bwd(device, c.dtype)(v.q, v.k, v.v, gout, lse, g.q, g.k, g.v, p);
  return {out, lse, g.q, g.k, g.v};
}

// ---- the fp64 reference magnitudes (support/tolerances.h, AttentionTolerance)
struct Magnitudes {
  std::vector<double> out, lse, gq, gk, gv;  // [B * H, T|S, D] and [B * H, T]
};

std::vector<double> values_of(const mt::Tensor& t) { return t.to(kHost).to(mt::kFloat64).contiguous().to_vector<double>(); }

Magnitudes magnitudes(const Case& c, const Views& in, const mt::Tensor& gout, double scale) {
  const std::vector<double> q = values_of(in.q), k = values_of(in.k), v = values_of(in.v), go = values_of(gout);
  const int64_t T = c.T, S = c.S, D = c.D;
  Magnitudes m;
  m.out.assign(c.B * c.H * T * D, 0.0);
  m.gq.assign(c.B * c.H * T * D, 0.0);
  m.lse.assign(c.B * c.H * T, 0.0);
  m.gk.assign(c.B * c.H * S * D, 0.0);
  m.gv.assign(c.B * c.H * S * D, 0.0);
  const double abs_scale = std::abs(scale);
  std::vector<double> x(S), p(S), dp(S), absdot(S);
  for (int64_t bh = 0; bh < c.B * c.H; ++bh) {
    const double* qh = q.data() + bh * T * D;
    const double* kh = k.data() + bh * S * D;
    const double* vh = v.data() + bh * S * D;
    const double* gh = go.data() + bh * T * D;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t len = c.causal ? std::min(S, t + 1) : S;  // keys query t sees
      if (len == 0) continue;
      double max = -INFINITY;
      for (int64_t s = 0; s < len; ++s) {
        double dot = 0, abs_dot = 0, dout_dot = 0;
        for (int64_t f = 0; f < D; ++f) {
          dot += qh[t * D + f] * kh[s * D + f];
          abs_dot += std::abs(qh[t * D + f] * kh[s * D + f]);
          dout_dot += gh[t * D + f] * vh[s * D + f];
        }
        x[s] = scale * dot;
        absdot[s] = abs_dot;
        dp[s] = dout_dot;
        max = std::max(max, x[s]);
      }
      double sum = 0;
      for (int64_t s = 0; s < len; ++s) sum += p[s] = std::exp(x[s] - max);
      double delta = 0, lse_terms = 0;
      for (int64_t s = 0; s < len; ++s) {
        p[s] /= sum;
        delta += p[s] * dp[s];
        lse_terms += p[s] * absdot[s];
      }
      m.lse[bh * T + t] = abs_scale * lse_terms;
      for (int64_t s = 0; s < len; ++s) {
        const double ds = abs_scale * p[s] * (std::abs(dp[s]) + std::abs(delta));  // >= |dS[t, s]|
        for (int64_t f = 0; f < D; ++f) {
          m.out[(bh * T + t) * D + f] += p[s] * std::abs(vh[s * D + f]);
          m.gq[(bh * T + t) * D + f] += ds * std::abs(kh[s * D + f]);
          m.gk[(bh * S + s) * D + f] += ds * std::abs(qh[t * D + f]);
          m.gv[(bh * S + s) * D + f] += p[s] * std::abs(gh[t * D + f]);
        }
      }
    }
  }
  return m;
}

// Every element within rtol |cpu| + term M + atol + term_atol * terms * max|x|; equal values (the
// -inf lse of a row without keys) pass.
void expect_within(const mt::Tensor& gpu, const mt::Tensor& cpu, const std::vector<double>& mag,
                   const AttentionTolerance& tol, int64_t terms, const char* what) {
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  const std::vector<double> g = values_of(gpu), c = values_of(cpu);
  ASSERT_EQ(c.size(), mag.size()) << what;
  const double floor = tol.atol + tol.term_atol * static_cast<double>(terms) * kInputBound;
  int64_t bad = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const double bound = tol.rtol * std::abs(c[i]) + tol.term * mag[i] + floor;
    if (g[i] == c[i] || std::abs(g[i] - c[i]) <= bound) continue;  // NaN fails
    if (bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " gpu " << g[i] << " cpu " << c[i] << " bound " << bound
                    << " (M " << mag[i] << ")";
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << c.size() << " elements out of bounds";
}

void expect_gpu_matches_cpu(const Case& c, uint64_t seed) {
  SCOPED_TRACE(case_name(c));
  mt::Generator g(seed);
  const HostInputs host = random_inputs(c, g);
  const Results cpu = run_tables(c, host, kHost), gpu = run_tables(c, host, kGpu);
  const Views in = views_of(c, host.in);
  const double scale = c.scale != 0.0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.D));
  const Magnitudes m = magnitudes(c, in, out_view(host.gout), scale);
  const AttentionTolerance tol = mt::testing::cuda_attention(c.dtype, tensor_cores(c));
  expect_within(gpu.out, cpu.out, m.out, tol, c.S, "out");
  expect_within(gpu.lse, cpu.lse, m.lse, mt::testing::cuda_attention_lse(c.dtype), c.S, "lse");
  expect_within(gpu.gq, cpu.gq, m.gq, tol, c.S, "gq");
  expect_within(gpu.gk, cpu.gk, m.gk, tol, c.T, "gk");
  expect_within(gpu.gv, cpu.gv, m.gv, tol, c.T, "gv");
}

const mt::DType kDTypes[] = {mt::kFloat32, mt::kFloat64, mt::kBFloat16, mt::kFloat16};
// 16, 64, 128: the tensor-core kernels' head dims (one fragment, GPT-small's, the largest); 40: not a
// multiple of 16, declined.
const int64_t kHeadDims[] = {16, 64, 128, 40};

// ---- through the kernel tables
TEST(CudaAttention, SelfAttentionOnAPackedProjectionMatchesTheCpu) {
  MT_REQUIRE_GPU();
  uint64_t seed = 100;
  // 1: a single row; 17: one partial tile; 130: two full 64-row tiles and a partial one.
  for (mt::DType dt : kDTypes)
    for (int64_t D : kHeadDims)
      for (int64_t T : {1, 17, 130})
        for (bool causal : {false, true}) expect_gpu_matches_cpu({dt, 2, 2, T, T, D, causal, Layout::kPacked, 0.0}, ++seed);
}

TEST(CudaAttention, CrossAttentionWithMoreOrFewerKeysMatchesTheCpu) {
  MT_REQUIRE_GPU();
  uint64_t seed = 200;
  struct Lengths {
    int64_t T, S;
  };
  // T < S and T > S (causal: top-left aligned, query t sees keys s <= t; keys past T are seen by no
  // query, their gradients are 0), partial tiles on both sides; S == 0 (out 0, lse -inf, gq 0) and
  // T == 0 (gk, gv 0).
  const Lengths lengths[] = {{17, 130}, {130, 17}, {1, 130}, {130, 1}, {64, 65}, {7, 0}, {0, 7}};
  for (mt::DType dt : kDTypes)
    for (int64_t D : kHeadDims)
      for (const Lengths& l : lengths)
        for (bool causal : {false, true})
          expect_gpu_matches_cpu({dt, 2, 3, l.T, l.S, D, causal, Layout::kSeparate, 0.0}, ++seed);
}

TEST(CudaAttention, UnalignedRowsAndOtherScalesMatchTheCpu) {
  MT_REQUIRE_GPU();
  uint64_t seed = 300;
  for (mt::DType dt : kDTypes)
    for (int64_t D : {int64_t{16}, int64_t{64}})
      for (bool causal : {false, true}) {
        // Rows one element off 16-byte alignment: the warp kernels run, at their tighter bound.
        expect_gpu_matches_cpu({dt, 2, 2, 70, 45, D, causal, Layout::kMisaligned, 0.0}, ++seed);
        // A larger scale sharpens the softmax (rows dominated by one key), a negative one flips it.
        for (double scale : {1.0, -0.3}) expect_gpu_matches_cpu({dt, 1, 2, 90, 90, D, causal, Layout::kPacked, scale}, ++seed);
      }
}

TEST(CudaAttention, BackwardIsDeterministic) {
  MT_REQUIRE_GPU();
  // No atomics: gq, gk and gv of one (batch, head) are each summed by one block in a fixed order.
  for (mt::DType dt : {mt::kBFloat16, mt::kFloat16, mt::kFloat32}) {
    SCOPED_TRACE(mt::to_string(dt));
    const Case c{dt, 2, 4, 130, 130, 64, true, Layout::kPacked, 0.0};
    mt::Generator g(400);
    const HostInputs host = random_inputs(c, g);
    const Results first = run_tables(c, host, kGpu), second = run_tables(c, host, kGpu);
    EXPECT_EQ(bytes_of(second.out), bytes_of(first.out));
    EXPECT_EQ(bytes_of(second.lse), bytes_of(first.lse));
    EXPECT_EQ(bytes_of(second.gq), bytes_of(first.gq));
    EXPECT_EQ(bytes_of(second.gk), bytes_of(first.gk));
    EXPECT_EQ(bytes_of(second.gv), bytes_of(first.gv));
  }
}

// ---- through the op front-ends, with autograd (the GPT's qkv_attention; scaled_dot_product_attention)
TEST(CudaAttention, QkvAttentionAndSdpaOpsMatchTheCpu) {
  MT_REQUIRE_GPU();
  for (mt::DType dt : kDTypes) {
    for (bool causal : {false, true}) {
      // qkv_attention: the packed [B, T, 3 * H * D] projection, out [B, T, H * D], one packed gradient.
      const Case c{dt, 2, 2, 130, 130, 64, causal, Layout::kPacked, 0.0};
      SCOPED_TRACE(case_name(c) + " (qkv_attention)");
      mt::Generator g(500);
      const HostInputs host = random_inputs(c, g);
      const mt::Tensor gy = host.gout.view({c.B, c.T, c.H * c.D});
      std::vector<mt::Tensor> outs, grads;
      for (mt::Device d : {kHost, kGpu}) {
        // detach(): on the host, to(kHost) is the input itself; marking it would make the next
        // device's copy a non-leaf without a grad.
        mt::Tensor x = host.in.x.to(d).detach().requires_grad_(true);
        mt::Tensor y = F::qkv_attention(x, c.H, causal);
        y.backward(gy.to(d));
        outs.push_back(out_view(y.view({c.B, c.T, c.H, c.D})));
        grads.push_back(x.grad());
      }
      const Magnitudes m = magnitudes(c, views_of(c, host.in), out_view(host.gout), 1.0 / std::sqrt(64.0));
      const AttentionTolerance tol = mt::testing::cuda_attention(dt, tensor_cores(c));
      expect_within(outs[1], outs[0], m.out, tol, c.S, "out");
      const Views gg = views_of(c, {grads[1], mt::Tensor()}), gc = views_of(c, {grads[0], mt::Tensor()});
      expect_within(gg.q, gc.q, m.gq, tol, c.S, "gq");
      expect_within(gg.k, gc.k, m.gk, tol, c.T, "gk");
      expect_within(gg.v, gc.v, m.gv, tol, c.T, "gv");
    }
    // scaled_dot_product_attention on contiguous [B, H, T|S, D] tensors, T < S.
    const Case c{dt, 2, 2, 33, 100, 64, true, Layout::kSeparate, 0.0};
    SCOPED_TRACE(case_name(c) + " (scaled_dot_product_attention)");
    mt::Generator g(501);
    const HostInputs host = random_inputs(c, g);
    const Views in = views_of(c, host.in);
    const mt::Tensor gy = out_view(host.gout).contiguous();
    std::vector<mt::Tensor> outs;
    std::vector<Views> grads;
    for (mt::Device d : {kHost, kGpu}) {
      mt::Tensor q = in.q.contiguous().to(d).detach().requires_grad_(true),
                 k = in.k.contiguous().to(d).detach().requires_grad_(true),
                 v = in.v.contiguous().to(d).detach().requires_grad_(true);
      mt::Tensor y = F::scaled_dot_product_attention(q, k, v, true);
      y.backward(gy.to(d));
      outs.push_back(y);
      grads.push_back({q.grad(), k.grad(), v.grad()});
    }
    const Magnitudes m = magnitudes(c, in, out_view(host.gout), 1.0 / std::sqrt(64.0));
    const AttentionTolerance tol = mt::testing::cuda_attention(dt, tensor_cores(c));
    expect_within(outs[1], outs[0], m.out, tol, c.S, "out");
    expect_within(grads[1].q, grads[0].q, m.gq, tol, c.S, "gq");
    expect_within(grads[1].k, grads[0].k, m.gk, tol, c.T, "gk");
    expect_within(grads[1].v, grads[0].v, m.gv, tol, c.T, "gv");
  }
}

}  // namespace
