// scaled_dot_product_attention (src/ops/attention.cpp): values against an fp64 loop reference with and
// without the causal mask (T == S and T != S), gradients through the matmul / fused softmax / matmul
// composition by finite differences, a 16-bit run against fp32, and errors.
#include <gtest/gtest.h>

#include <cmath>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/nn/functional.h"
#include "ops/test_nn_helpers.h"

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
    EXPECT_EQ(gradcheck([causal](const std::vector<Tensor>& in) {
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
    amp::Autocast autocast(kCPU, kBFloat16);
    out = F::scaled_dot_product_attention(q, k, v, true);
  }
  EXPECT_EQ(out.dtype(), kBFloat16);
  EXPECT_CLOSE(out.to(kFloat32), F::scaled_dot_product_attention(q.detach(), k, v, true), testing::kGemmBf16);
  out.backward(ones(out.shape(), {.dtype = kBFloat16}));
  EXPECT_EQ(q.grad().dtype(), kFloat32);  // an fp32 leaf gets an fp32 gradient through the cast
}

TEST(Attention, Errors) {
  expect_error([] { F::scaled_dot_product_attention(zeros({2, 3, 4}), zeros({2, 3, 5}), zeros({2, 3, 4})); },
               {"scaled_dot_product_attention", "[2, 3, 5]"});
  expect_error([] { F::scaled_dot_product_attention(zeros({3, 4}), zeros({2, 3, 4}), zeros({2, 3, 4})); },
               {"scaled_dot_product_attention", "rank"});
}

}  // namespace
}  // namespace mixtrain::testing
