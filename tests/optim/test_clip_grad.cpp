// clip_grad_norm_: totals for norms 2, 1, inf and p, PyTorch's min(1, max_norm / (norm + 1e-6))
// scaling, error_if_nonfinite, 16-bit and strided gradients, thread-count independence.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "mixtrain/mixtrain.h"
#include "mixtrain/optim/clip_grad.h"
#include "support/cpu_env.h"

namespace mt = mixtrain;
using mt::optim::clip_grad_norm_;

namespace {

// Parameters with gradients [3, 4] and [[12]] (2-norm 13, 1-norm 19, max 12).
std::vector<mt::Tensor> params_3_4_12(mt::DType dtype = mt::kFloat32) {
  mt::Tensor a = mt::zeros({2}, {.dtype = dtype}), b = mt::zeros({1, 1}, {.dtype = dtype}), c = mt::zeros({5});
  for (mt::Tensor* t : {&a, &b, &c}) t->requires_grad_();
  a.set_grad(mt::from_vector(std::vector<float>{3, 4}, {2}, {.dtype = dtype}));
  b.set_grad(mt::from_vector(std::vector<float>{12}, {1, 1}, {.dtype = dtype}));
  return {a, b, c};  // c has no gradient: skipped
}

std::vector<float> grads_of(const std::vector<mt::Tensor>& ps) {
  std::vector<float> out;
  for (const mt::Tensor& p : ps)
    if (p.grad().defined())
      for (float v : p.grad().to_vector<float>()) out.push_back(v);
  return out;
}

}  // namespace

TEST(ClipGradNorm, TotalsAndScaling) {
  auto ps = params_3_4_12();
  EXPECT_FLOAT_EQ(clip_grad_norm_(ps, 100.0), 13.0);
  EXPECT_EQ(grads_of(ps), (std::vector<float>{3, 4, 12}));  // below max_norm: untouched
  EXPECT_FLOAT_EQ(clip_grad_norm_(ps, 6.5), 13.0);
  const float coef = 6.5f / (13.0f + 1e-6f);
  EXPECT_EQ(grads_of(ps), (std::vector<float>{3 * coef, 4 * coef, 12 * coef}));
  EXPECT_NEAR(clip_grad_norm_(ps, 100.0), 6.5, 1e-5);

  EXPECT_FLOAT_EQ(clip_grad_norm_(params_3_4_12(), 100.0, 1.0), 19.0);
  EXPECT_FLOAT_EQ(clip_grad_norm_(params_3_4_12(), 100.0, mt::optim::kInfNorm), 12.0);
  EXPECT_NEAR(clip_grad_norm_(params_3_4_12(), 100.0, 3.0), std::cbrt(27.0 + 64.0 + 1728.0), 1e-4);
  auto inf_ps = params_3_4_12();
  clip_grad_norm_(inf_ps, 6.0, mt::optim::kInfNorm);
  EXPECT_NEAR(grads_of(inf_ps)[2], 6.0, 1e-5);
  // No gradients at all.
  mt::Tensor lone = mt::zeros({3});
  lone.requires_grad_();
  EXPECT_EQ(clip_grad_norm_({lone}, 1.0), 0.0);
}

TEST(ClipGradNorm, NonFinite) {
  auto ps = params_3_4_12();
  ps[0].grad().select(0, 0).fill_(std::numeric_limits<float>::infinity());
  try {
    clip_grad_norm_(ps, 1.0, 2.0, /*error_if_nonfinite=*/true);
    ADD_FAILURE() << "expected an error";
  } catch (const mt::Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("is non-finite, so it cannot be clipped"));
  }
  EXPECT_EQ(grads_of(ps)[1], 4.0f);  // nothing changed
  // Without the flag: PyTorch's behaviour, the coefficient is max_norm / inf = 0 (inf * 0 = NaN).
  EXPECT_TRUE(std::isinf(clip_grad_norm_(ps, 1.0)));
  std::vector<float> g = grads_of(ps);
  EXPECT_TRUE(std::isnan(g[0]));
  EXPECT_EQ(g[1], 0.0f);
  auto nan_ps = params_3_4_12();
  nan_ps[1].grad().fill_(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(clip_grad_norm_(nan_ps, 1.0)));
  EXPECT_TRUE(std::isnan(grads_of(nan_ps)[0]));
}

TEST(ClipGradNorm, SixteenBitAndStridedGradients) {
  for (mt::DType dtype : {mt::kBFloat16, mt::kFloat16}) {
    auto ps = params_3_4_12(dtype);
    EXPECT_FLOAT_EQ(clip_grad_norm_(ps, 6.5), 13.0);
    EXPECT_NEAR(grads_of(ps)[2], 6.0, 6.0 / 128);
    EXPECT_EQ(ps[0].grad().dtype(), dtype);
  }
  // A transposed gradient view.
  mt::Tensor p = mt::zeros({2, 2});
  p.requires_grad_();
  mt::Tensor storage = mt::from_vector(std::vector<float>{0, 6, 8, 0}, {2, 2});
  p.set_grad(storage.t());
  EXPECT_FLOAT_EQ(clip_grad_norm_({p}, 5.0), 10.0);
  EXPECT_NEAR(storage.to_vector<float>()[1], 3.0, 1e-5);
}

TEST(ClipGradNorm, ThreadCountIndependent) {
  auto run = [](int threads) {
    return mt::testing::with_threads(threads, [] {
      mt::Generator g(9);
      std::vector<mt::Tensor> ps;
      for (int64_t n : {100000, 7, 50000}) {
        mt::Tensor p = mt::zeros({n});
        p.requires_grad_();
        p.set_grad(mt::randn({n}, {}, &g));
        ps.push_back(p);
      }
      double norm = clip_grad_norm_(ps, 1.0);
      return std::make_pair(norm, ps[0].grad().to_vector<float>());
    });
  };
  auto one = run(1), four = run(4);
  EXPECT_EQ(one.first, four.first);
  EXPECT_EQ(one.second, four.second);
  EXPECT_NEAR(one.first, std::sqrt(150007.0), 0.01 * std::sqrt(150007.0));
}
