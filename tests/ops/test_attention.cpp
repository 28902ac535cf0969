// scaled_dot_product_attention and qkv_attention (src/ops/attention.cpp, fused kernels in
// src/backends/cpu/kernels/nn_attention.cpp): values against an fp64 loop reference with and without the
// causal mask (T == S and T != S), forward and backward against the unfused matmul / masked softmax
// / matmul composition (sizes that cross the kernel's query blocks and register tiles, both GEMM
// paths), finite-difference gradients in fp64, 16-bit runs against fp32, thread-count independence,
// autocast, and errors.
#include <gtest/gtest.h>

#include <array>
#include <cmath>

#include "backends/cpu/kernels/attention_gemm.h"
#include "mixtrain/amp/autocast.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/ops/elementwise.h"
#include "mixtrain/ops/linalg.h"
#include "ops/test_nn_helpers.h"
#include "support/checked_device.h"

namespace mixtrain::testing {
namespace {

namespace F = nn::functional;

// softmax(q k^T * scale, causal: key j <= query i) v for [B, T, D], [B, S, D], [B, S, Dv] in double.
Tensor reference_sdpa(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  const int64_t B = q.size(0), T = q.size(1), D = q.size(2), S = k.size(1), Dv = v.size(2);
  const std::vector<double> qv = q.to_vector<double>(), kv = k.to_vector<double>(), vv = v.to_vector<double>();
  std::vector<double> out(static_cast<size_t>(B * T * Dv), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < T; ++i) {
      std::vector<double> s(S);
      const int64_t len = causal ? std::min(S, i + 1) : S;
      double m = -INFINITY, z = 0;
      for (int64_t j = 0; j < len; ++j) {
        double d = 0;
        for (int64_t c = 0; c < D; ++c) d += qv[(b * T + i) * D + c] * kv[(b * S + j) * D + c];
        s[j] = d * scale;
        m = std::max(m, s[j]);
      }
      for (int64_t j = 0; j < len; ++j) z += s[j] = std::exp(s[j] - m);
      for (int64_t j = 0; j < len; ++j)
        for (int64_t c = 0; c < Dv; ++c) out[(b * T + i) * Dv + c] += s[j] / z * vv[(b * S + j) * Dv + c];
    }
  }
  return from_vector(out, {B, T, Dv});
}

TEST(Attention, MatchesFp64Reference) {
  struct Case {
    int64_t T, S;
    bool causal;
  };
  for (Case c : {Case{5, 5, false}, Case{5, 5, true}, Case{3, 6, true}, Case{6, 3, true}}) {
    SCOPED_TRACE("T " + std::to_string(c.T) + " S " + std::to_string(c.S) + " causal " + std::to_string(c.causal));
    const Tensor q = randn32({2, c.T, 4}, 1), k = randn32({2, c.S, 4}, 2), v = randn32({2, c.S, 3}, 3);
    EXPECT_CLOSE(F::scaled_dot_product_attention(q, k, v, c.causal), reference_sdpa(q, k, v, c.causal, 0.5),
                 testing::kGemmFp32);
    EXPECT_CLOSE(F::scaled_dot_product_attention(q, k, v, c.causal, 0.3), reference_sdpa(q, k, v, c.causal, 0.3),
                 testing::kGemmFp32);
  }
}

TEST(Attention, CausalFirstQuerySeesOnlyTheFirstKey) {
  const Tensor q = randn32({1, 2, 4, 8}, 4), k = randn32({1, 2, 4, 8}, 5), v = randn32({1, 2, 4, 8}, 6);
  const Tensor out = F::scaled_dot_product_attention(q, k, v, true);
  EXPECT_CLOSE(out.select(2, 0), v.select(2, 0), testing::kFp32VsReference);
}

TEST(Attention, Gradcheck) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    Tensor q = rand_input({1, 2, 4, 3}, -1, 1, 1), k = rand_input({1, 2, 5, 3}, -1, 1, 2);
    Tensor v = rand_input({1, 2, 5, 2}, -1, 1, 3);
    EXPECT_EQ(gradcheck(
                  [causal](const std::vector<Tensor>& in) {
                    return F::scaled_dot_product_attention(in[0], in[1], in[2], causal);
                  },
                  {q, k, v}),
              "");
  }
}

TEST(Attention, HalfMatchesFp32) {
  for (DType dt : testing::kHalfDTypes) {
    // Three 16-bit roundings in a row (scores, probabilities, output), each on GEMM results.
    const testing::Tolerance tol = dt == kBFloat16 ? testing::kGemmBf16 : testing::kGemmFp16;
    testing::expect_half_matches_fp32(
        [](const std::vector<Tensor>& in) { return F::scaled_dot_product_attention(in[0], in[1], in[2], true); },
        {randn32({2, 6, 8}, 7), randn32({2, 6, 8}, 8), randn32({2, 6, 4}, 9)}, dt, tol);
  }
}

TEST(Attention, AutocastRunsInLowerPrecision) {
  Tensor q = randn32({2, 5, 8}, 10).requires_grad_();
  const Tensor k = randn32({2, 5, 8}, 11), v = randn32({2, 5, 8}, 12);
  Tensor out;
  {
    amp::Autocast autocast(mixtrain::testing::test_device().type, kBFloat16);
    out = F::scaled_dot_product_attention(q, k, v, true);
  }
  EXPECT_EQ(out.dtype(), kBFloat16);
  EXPECT_CLOSE(out.to(kFloat32), F::scaled_dot_product_attention(q.detach(), k, v, true), testing::kGemmBf16);
  out.backward(ones(out.shape(), {.dtype = kBFloat16}));
  EXPECT_EQ(q.grad().dtype(), kFloat32);  // an fp32 leaf gets an fp32 gradient through the cast
}

TEST(Attention, Errors) {
  expect_error(
      [] {
        F::scaled_dot_product_attention(zeros({2, 3, 4}), zeros({2, 3, 5}), zeros({2, 3, 4}));
      },
      {"scaled_dot_product_attention", "[2, 3, 5]"});
  expect_error(
      [] {
        F::scaled_dot_product_attention(zeros({3, 4}), zeros({2, 3, 4}), zeros({2, 3, 4}));
      },
      {"scaled_dot_product_attention", "rank"});
}

// The composition the fused kernel replaces: matmul, causal mask, softmax, matmul (autograd through
// each op).
Tensor unfused_sdpa(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const int64_t T = q.size(-2), S = k.size(-2);
  Tensor scores = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  if (causal) {
    std::vector<uint8_t> m(static_cast<size_t>(T * S));
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < S; ++j) m[i * S + j] = j > i;
    scores = masked_fill(scores, from_vector(m, {T, S}).to(kBool), -INFINITY);
  }
  return matmul(F::softmax(scores, -1), v);
}

// Output and input gradients of f on fp32 leaves for the output gradient gy.
std::vector<Tensor> value_and_grads(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                    const std::vector<Tensor>& inputs, uint64_t seed) {
  std::vector<Tensor> leaves;
  for (const Tensor& x : inputs) leaves.push_back(x.detach().clone().requires_grad_());
  const Tensor y = f(leaves);
  std::vector<Tensor> result{y.detach()};
  for (const Tensor& g : autograd::grad({y}, leaves, {randn32(y.shape(), seed)})) result.push_back(g);
  return result;
}

void expect_all_close(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const testing::Tolerance& tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(i == 0 ? std::string("output") : "gradient " + std::to_string(i - 1));
    EXPECT_CLOSE(a[i], b[i], tol);
  }
}

TEST(Attention, FusedMatchesUnfusedComposition) {
  struct Case {
    int64_t T, S, D, Dv;
  };
  // 70 and 130 rows cross the 64-row query blocks, the 6-row register tiles and the 64-column tiles.
  for (Case c : {Case{70, 70, 16, 16}, Case{130, 130, 64, 64}, Case{9, 13, 5, 7}, Case{13, 9, 8, 3}}) {
    for (bool causal : {false, true}) {
      for (cpu::Isa level : kernel_isa_levels()) {  // the AVX-512 tiles where they run, the plain loop always
        SCOPED_TRACE("T " + std::to_string(c.T) + " S " + std::to_string(c.S) + " D " + std::to_string(c.D) +
                     (causal ? " causal " : " full ") + std::string(cpu::to_string(level)));
        cpu::MaxIsaGuard cap(level);
        const std::vector<Tensor> in{randn32({2, 2, c.T, c.D}, 20), randn32({2, 2, c.S, c.D}, 21),
                                     randn32({2, 2, c.S, c.Dv}, 22)};
        const auto fused = value_and_grads(
            [causal](const std::vector<Tensor>& x) {
              return F::scaled_dot_product_attention(x[0], x[1], x[2], causal);
            },
            in, 23);
        const auto unfused = value_and_grads(
            [causal](const std::vector<Tensor>& x) { return unfused_sdpa(x[0], x[1], x[2], causal); }, in, 23);
        expect_all_close(fused, unfused, testing::kGemmFp32);
      }
    }
  }
}

// qkv [B, T, 3C] split as a Linear(C, 3C) output: [B, T, 3, H, D] -> q, k, v [B, H, T, D].
Tensor split_qkv(const Tensor& qkv, int64_t H, int which) {
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3 / H;
  return qkv.view({B, T, 3, H, D}).permute({2, 0, 3, 1, 4}).select(0, which);
}

Tensor qkv_reference(const Tensor& qkv, int64_t H, bool causal) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  const Tensor o =
      F::scaled_dot_product_attention(split_qkv(qkv, H, 0), split_qkv(qkv, H, 1), split_qkv(qkv, H, 2), causal);
  return o.transpose(1, 2).reshape({B, T, C});
}

TEST(QkvAttention, MatchesSplitHeadsAndUnfusedComposition) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    const std::vector<Tensor> in{randn32({2, 67, 3 * 4 * 8}, 30)};
    const auto fused =
        value_and_grads([causal](const std::vector<Tensor>& x) { return F::qkv_attention(x[0], 4, causal); }, in, 31);
    // The same op through the separate-tensor entry point: identical kernels, so bit-identical.
    const auto split =
        value_and_grads([causal](const std::vector<Tensor>& x) { return qkv_reference(x[0], 4, causal); }, in, 31);
    expect_all_close(fused, split, testing::Tolerance{0, 0});
    // And the unfused matmul / softmax composition.
    const auto unfused = value_and_grads(
        [causal](const std::vector<Tensor>& x) {
          const Tensor& qkv = x[0];
          const Tensor o = unfused_sdpa(split_qkv(qkv, 4, 0), split_qkv(qkv, 4, 1), split_qkv(qkv, 4, 2), causal);
          return o.transpose(1, 2).reshape({qkv.size(0), qkv.size(1), qkv.size(2) / 3});
        },
        in, 31);
    expect_all_close(fused, unfused, testing::kGemmFp32);
  }
}

TEST(QkvAttention, Gradcheck) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    Tensor qkv = rand_input({2, 3, 3 * 2 * 2}, -1, 1, 40);
    EXPECT_EQ(gradcheck([causal](const std::vector<Tensor>& in) { return F::qkv_attention(in[0], 2, causal); }, {qkv}),
              "");
    EXPECT_EQ(
        gradcheck([causal](const std::vector<Tensor>& in) { return F::qkv_attention(in[0], 2, causal, 0.7); }, {qkv}),
        "");
  }
}

TEST(QkvAttention, HalfMatchesFp32) {
  for (DType dt : testing::kHalfDTypes) {
    // fp32 inside; the only roundings are the output (forward) and the packed gradient (backward).
    testing::expect_half_matches_fp32([](const std::vector<Tensor>& in) { return F::qkv_attention(in[0], 2, true); },
                                      {randn32({2, 70, 3 * 2 * 16}, 41)}, dt, testing::vs_fp32(dt));
  }
}

TEST(Attention, HalfFusedIsOneRounding) {
  for (DType dt : testing::kHalfDTypes) {
    testing::expect_half_matches_fp32(
        [](const std::vector<Tensor>& in) { return F::scaled_dot_product_attention(in[0], in[1], in[2], true); },
        {randn32({2, 33, 16}, 42), randn32({2, 33, 16}, 43), randn32({2, 33, 8}, 44)}, dt, testing::vs_fp32(dt));
  }
}

TEST(QkvAttention, IndependentOfThreadCount) {
  const Tensor x = randn32({4, 80, 3 * 4 * 16}, 50);
  auto run = [&] {
    const auto r = value_and_grads([](const std::vector<Tensor>& in) { return F::qkv_attention(in[0], 4, true); },
                                   {x.to(kBFloat16).to(kFloat32)}, 51);
    return std::vector<std::vector<float>>{r[0].to_vector<float>(), r[1].to_vector<float>()};
  };
  EXPECT_EQ(testing::with_threads(1, run), testing::with_threads(2, run));
}

TEST(QkvAttention, AutocastRunsInLowerPrecisionAndSaves16Bit) {
  Tensor x = randn32({2, 5, 3 * 2 * 4}, 52).requires_grad_();
  Tensor out;
  {
    amp::Autocast autocast(mixtrain::testing::test_device().type, kBFloat16);
    out = F::qkv_attention(x, 2, true);
  }
  EXPECT_EQ(out.dtype(), kBFloat16);
  EXPECT_CLOSE(out.to(kFloat32), F::qkv_attention(x.detach(), 2, true), testing::kGemmBf16);
  out.backward(ones(out.shape(), {.dtype = kBFloat16}));
  EXPECT_EQ(x.grad().dtype(), kFloat32);
}

TEST(QkvAttention, EmptyBatchAndSequence) {
  EXPECT_EQ(F::qkv_attention(zeros({0, 3, 12}), 2, true).shape(), (Shape{0, 3, 4}));
  EXPECT_EQ(F::qkv_attention(zeros({2, 0, 12}), 2, true).shape(), (Shape{2, 0, 4}));
  // S == 0: every query sees no key; the output is 0 (as the unfused composition's empty product).
  const Tensor q = randn32({2, 3, 4}, 53).requires_grad_();
  const Tensor out = F::scaled_dot_product_attention(q, zeros({2, 0, 4}), zeros({2, 0, 5}));
  EXPECT_EQ(out.shape(), (Shape{2, 3, 5}));
  EXPECT_CLOSE(out, zeros({2, 3, 5}), testing::kFp32VsReference);
}

TEST(QkvAttention, Errors) {
  expect_error([] { F::qkv_attention(zeros({2, 3, 10}), 2); }, {"qkv_attention", "[2, 3, 10]", "num_heads = 2"});
  expect_error([] { F::qkv_attention(zeros({2, 3, 12}), 0); }, {"qkv_attention", "num_heads = 0"});
  expect_error([] { F::qkv_attention(zeros({12}), 2); }, {"qkv_attention", "at least 2-D"});
  expect_error([] { F::qkv_attention(zeros({2, 3, 12}, {.dtype = kInt64}), 2); }, {"qkv_attention", "floating"});
  expect_error([] { F::qkv_attention(zeros({2, 3, 12}), 2, false, INFINITY); }, {"qkv_attention", "finite"});
}

TEST(AttentionGemm, BandedProductsMatchTheLoop) {
  // C = A B with A read transposed (rsa 1, csa M), over sizes that leave tails in every tile dim.
  // n_hi: entries right of the band need not be written (n_hi 40 cuts tiles part-way along a row,
  // where the vector kernels drop the vectors no row of the tile needs). k_hi / k_lo: A is zero
  // outside the band (as the caller promises), so skipping those terms must give the full product.
  const int64_t M = 13, N = 70, K = 20;
  const std::vector<float> a_full = randn32({K, M}, 60).to_vector<float>(), b = randn32({K, N}, 61).to_vector<float>();
  using kernels::attn::Band, kernels::attn::kOff;
  for (const Band band : {Band{}, Band{.n_hi = 3}, Band{.n_hi = 40}, Band{.k_hi = 3}, Band{.k_lo = -2}}) {
    std::vector<float> a = a_full;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k)
        if ((band.k_hi != kOff && k > i + band.k_hi) || (band.k_lo != kOff && k < i + band.k_lo)) a[k * M + i] = 0;
    for (cpu::Isa level : kernel_isa_levels())
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(std::string(cpu::to_string(level)) + (accumulate ? " C += A B" : " C = A B"));
      std::vector<float> c(M * N, 7.0f);
      {
        cpu::MaxIsaGuard cap(level);
        kernels::attn::gemm(M, N, K, a.data(), 1, M, b.data(), N, c.data(), N, accumulate, band);
      }
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
          if (band.n_hi != kOff && j > i + band.n_hi) continue;  // not needed: may be left as is
          double ref = accumulate ? 7.0 : 0.0;
          for (int64_t k = 0; k < K; ++k) ref += double(a[k * M + i]) * b[k * N + j];
          EXPECT_NEAR(c[i * N + j], ref, testing::kGemmFp32.atol + testing::kGemmFp32.rtol * std::abs(ref))
              << "i " << i << " j " << j << " band " << band.n_hi << "/"
              << band.k_hi << "/" << band.k_lo;
        }
      }
    }
  }
}

TEST(AttentionGemm, TransposeMovesEveryElementAtEveryLevel) {
  // Sizes with and without 8 x 8 blocks, ragged right and bottom edges, a source row stride wider
  // than the rows (a head's slice of a packed row); every element distinct, so a swap shows.
  for (auto [R, C, lda] : std::vector<std::array<int64_t, 3>>{{128, 64, 192}, {13, 19, 23}, {8, 8, 8}, {7, 3, 5}, {1, 17, 17}}) {
    std::vector<float> a(R * lda);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) + 0.5f;
    std::vector<double> ad(a.begin(), a.end());
    for (cpu::Isa level : kernel_isa_levels()) {
      SCOPED_TRACE(std::string(cpu::to_string(level)) + " " + std::to_string(R) + " x " + std::to_string(C));
      std::vector<float> out(R * C, -1.0f);
      std::vector<double> outd(R * C, -1.0);
      {
        cpu::MaxIsaGuard cap(level);
        kernels::attn::transpose(a.data(), lda, R, C, out.data());
        kernels::attn::transpose(ad.data(), lda, R, C, outd.data());
      }
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) {
          ASSERT_EQ(out[c * R + r], a[r * lda + c]) << "r " << r << " c " << c;
          ASSERT_EQ(outd[c * R + r], ad[r * lda + c]) << "r " << r << " c " << c;
        }
    }
  }
}

}  // namespace
}  // namespace mixtrain::testing
