// matmul / bmm / linear backward: fp64 finite-difference checks (the fp64 path is the reference
// loop, so these check the backward formulas, broadcasting and 1-D handling), and 16-bit gradients
// against fp32 gradients on the same (representable) values.
#include <gtest/gtest.h>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/autograd.h"
#include "mixtrain/ops/elementwise.h"
#include "mixtrain/ops/linalg.h"
#include "ops/test_linalg_util.h"
#include "ops/test_nn_helpers.h"
#include "support/checked_device.h"

namespace mixtrain::testing {
namespace {

using kernels::Bf16Path;
using TL = std::vector<Tensor>;

TEST(LinalgGradcheck, Matmul2D) {
  EXPECT_EQ(gradcheck([](const TL& x) { return matmul(x[0], x[1]); },
                      {rand_input({3, 4}, -1, 1, 1), rand_input({4, 5}, -1, 1, 2)}),
            "");
}

TEST(LinalgGradcheck, MatmulTransposedOperands) {
  EXPECT_EQ(gradcheck([](const TL& x) { return matmul(x[0].t(), x[1].t()); },
                      {rand_input({4, 3}, -1, 1, 3), rand_input({5, 4}, -1, 1, 4)}),
            "");
}

TEST(LinalgGradcheck, MatmulBroadcastBatch) {
  // a's size-1 batch dim and b's missing one both need their gradient summed.
  EXPECT_EQ(gradcheck([](const TL& x) { return matmul(x[0], x[1]); },
                      {rand_input({2, 1, 3, 4}, -1, 1, 5), rand_input({3, 4, 2}, -1, 1, 6)}),
            "");
  // Batched a @ 2-D b: the folded dB = A_rows^T @ dC_rows path.
  EXPECT_EQ(gradcheck([](const TL& x) { return matmul(x[0], x[1]); },
                      {rand_input({2, 3, 4}, -1, 1, 7), rand_input({4, 5}, -1, 1, 8)}),
            "");
  // 2-D a @ batched b: dA summed over b's batch.
  EXPECT_EQ(gradcheck([](const TL& x) { return matmul(x[0], x[1]); },
                      {rand_input({3, 4}, -1, 1, 9), rand_input({2, 4, 5}, -1, 1, 10)}),
            "");
}

TEST(LinalgGradcheck, MatmulOneDimensional) {
  auto f = [](const TL& x) { return matmul(x[0], x[1]); };
  EXPECT_EQ(gradcheck(f, {rand_input({4}, -1, 1, 11), rand_input({4}, -1, 1, 12)}), "");
  EXPECT_EQ(gradcheck(f, {rand_input({4}, -1, 1, 13), rand_input({4, 3}, -1, 1, 14)}), "");
  EXPECT_EQ(gradcheck(f, {rand_input({3, 4}, -1, 1, 15), rand_input({4}, -1, 1, 16)}), "");
  EXPECT_EQ(gradcheck(f, {rand_input({4}, -1, 1, 17), rand_input({2, 4, 3}, -1, 1, 18)}), "");
  EXPECT_EQ(gradcheck(f, {rand_input({2, 3, 4}, -1, 1, 19), rand_input({4}, -1, 1, 20)}), "");
}

TEST(LinalgGradcheck, SameTensorOnBothSides) {
  // Both gradients reach one leaf and are summed by the engine (needs the elementwise add_).
  EXPECT_EQ(gradcheck([](const TL& x) { return matmul(x[0], x[0].t()); }, {rand_input({3, 4}, -1, 1, 40)}), "");
}

TEST(LinalgGradcheck, Bmm) {
  EXPECT_EQ(gradcheck([](const TL& x) { return bmm(x[0], x[1]); },
                      {rand_input({2, 3, 4}, -1, 1, 21), rand_input({2, 4, 5}, -1, 1, 22)}),
            "");
}

TEST(LinalgGradcheck, LinearWithAndWithoutBias) {
  EXPECT_EQ(gradcheck([](const TL& x) { return linear(x[0], x[1], x[2]); },
                      {rand_input({2, 3, 4}, -1, 1, 23), rand_input({5, 4}, -1, 1, 24), rand_input({5}, -1, 1, 25)}),
            "");
  EXPECT_EQ(gradcheck([](const TL& x) { return linear(x[0], x[1]); },
                      {rand_input({3, 4}, -1, 1, 26), rand_input({5, 4}, -1, 1, 27)}),
            "");
  EXPECT_EQ(gradcheck([](const TL& x) { return linear(x[0], x[1], x[2]); },
                      {rand_input({4}, -1, 1, 28), rand_input({5, 4}, -1, 1, 29), rand_input({5}, -1, 1, 30)}),
            "");
}

TEST(LinalgGradcheck, OnlySomeInputsRequireGrad) {
  Tensor x = uniform_input({3, 4}, kFloat64, 31), w = rand_input({5, 4}, -1, 1, 32),
         b = uniform_input({5}, kFloat64, 33);
  Tensor y = linear(x, w, b);
  y.backward(ones({3, 5}, {.dtype = kFloat64}));
  EXPECT_TRUE(w.grad().defined());
  EXPECT_FALSE(x.grad().defined());
  EXPECT_CLOSE(w.grad(), ref_matmul(ones({5, 3}, {.dtype = kFloat64}), x), kGradcheck);
}

// Runs f on `inputs` (fp32 values representable in dtype) in fp32 and in dtype, backpropagates
// the same (representable) output gradient, and compares outputs and input gradients.
void expect_grads_match_fp32(const std::function<Tensor(const TL&)>& f, const TL& values, DType dtype) {
  TL in32, in16;
  for (const Tensor& v : values) {
    Tensor r = v.to(dtype);
    in32.push_back(r.to(kFloat32).requires_grad_());
    in16.push_back(r.clone().requires_grad_());
  }
  Tensor y32 = f(in32), y16 = f(in16);
  ASSERT_EQ(y16.dtype(), dtype);
  Tensor g16 = uniform_input(y16.shape(), dtype, 99);
  y32.backward(g16.to(kFloat32));
  y16.backward(g16);
  const Tolerance tol = gemm_tol(dtype);
  EXPECT_CLOSE(y16, y32, tol);
  for (size_t i = 0; i < values.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "gradient of input " << i);
    ASSERT_TRUE(in16[i].grad().defined());
    EXPECT_EQ(in16[i].grad().dtype(), dtype);
    EXPECT_CLOSE(in16[i].grad(), in32[i].grad(), tol);
  }
}

// Runs once per 16-bit GemmMode (bf16 native, bf16 via fp32, fp16); see test_linalg_util.h.
class LinalgHalfModes : public GemmModeTest {};
INSTANTIATE_TEST_SUITE_P(Modes, LinalgHalfModes, ::testing::ValuesIn(kHalfGemmModes), gemm_mode_name);

TEST_P(LinalgHalfModes, GradsMatchFp32Gradients) {
  struct Case {
    const char* name;
    std::function<Tensor(const TL&)> f;
    std::vector<Shape> shapes;
  };
  const Case cases[] = {
      {"matmul 2-D", [](const TL& x) { return matmul(x[0], x[1]); }, {{17, 24}, {24, 9}}},
      {"matmul broadcast", [](const TL& x) { return matmul(x[0], x[1]); }, {{2, 1, 5, 8}, {3, 8, 4}}},
      {"matmul batched @ 2-D", [](const TL& x) { return matmul(x[0], x[1]); }, {{3, 5, 8}, {8, 6}}},
      {"bmm", [](const TL& x) { return bmm(x[0], x[1]); }, {{3, 6, 8}, {3, 8, 5}}},
      {"linear", [](const TL& x) { return linear(x[0], x[1], x[2]); }, {{4, 6, 32}, {12, 32}, {12}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TL values;
    uint64_t seed = 50;
    for (const Shape& s : c.shapes) values.push_back(uniform_input(s, kFloat32, seed++));
    expect_grads_match_fp32(c.f, values, GetParam().dtype);
  }
}

// On the fp32 route linear's backward widens dC once and shares it between both products and the
// bias sum: the gradients must be the bits that the separate 16-bit products give.
TEST(LinalgHalfGrads, LinearOnTheFp32RouteEqualsSeparateProducts) {
  for (DType dt : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(to_string(dt));
    Bf16PathGuard guard(Bf16Path::kFp32);
    ASSERT_TRUE(kernels::uses_fp32_route(dt));
    Tensor x = uniform_input({3, 13, 40}, dt, 70).requires_grad_();
    Tensor w = uniform_input({300, 40}, dt, 71).requires_grad_();
    Tensor b = uniform_input({300}, dt, 72).requires_grad_();
    Tensor g = (uniform_input({3, 13, 300}, kFloat32, 73) * 100.0).to(dt);  // sums that round
    linear(x, w, b).backward(g);
    Tensor g2 = g.reshape({39, 300});
    EXPECT_TRUE(bitwise_equal(x.grad(), matmul(g2, w.detach()).reshape({3, 13, 40})));
    EXPECT_TRUE(bitwise_equal(w.grad(), matmul(g2.t(), x.detach().reshape({39, 40}))));
    Tensor db = Tensor::empty({300}, dt, g2.device());
    kernels::sum_rows(g2, db);
    EXPECT_TRUE(bitwise_equal(b.grad(), db));
    EXPECT_CLOSE(b.grad(), ref_matmul(ones({1, 39}, {.dtype = kFloat64}), g2.to(kFloat64)).reshape({300}),
                 gemm_tol(dt));
  }
}

TEST(LinalgAutocast, LinearRunsInBf16AndFp32ParametersGetFp32Grads) {
  Tensor x = uniform_input({4, 8}, kFloat32, 60);
  Tensor w = uniform_input({3, 8}, kFloat32, 61).requires_grad_();
  Tensor b = uniform_input({3}, kFloat32, 62).requires_grad_();
  Tensor y;
  {
    amp::Autocast autocast(mixtrain::testing::test_device().type, kBFloat16);
    y = linear(x, w, b);
  }
  EXPECT_EQ(y.dtype(), kBFloat16);
  y.backward(ones({4, 3}, {.dtype = kBFloat16}));
  ASSERT_TRUE(w.grad().defined() && b.grad().defined());
  EXPECT_EQ(w.grad().dtype(), kFloat32);
  EXPECT_EQ(b.grad().dtype(), kFloat32);
  // d(sum y)/dW = column sums of x (rounded to bf16 once, as the forward saw it).
  Tensor expected = ref_matmul(ones({3, 4}, {.dtype = kFloat64}), x.to(kBFloat16));
  EXPECT_CLOSE(w.grad(), expected, kGemmBf16);
  EXPECT_EQ(b.grad().to_vector<float>(), std::vector<float>(3, 4.0f));
}

}  // namespace
}  // namespace mixtrain::testing
