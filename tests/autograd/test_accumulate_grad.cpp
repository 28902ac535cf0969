// AccumulateGrad takes a leaf's first gradient without a copy only when nothing else can see that
// gradient's memory. Each case below hands the leaf a gradient that something else still holds or
// aliases; a wrongly adopted gradient would show up as one .grad changing when another tensor is
// written in place. The last case checks the other side: an unshared gradient is adopted, not copied.
#include <gtest/gtest.h>

#include <vector>

#include "mixtrain/mixtrain.h"
#include "support/checked_device.h"

namespace mt = mixtrain;

namespace {

std::vector<float> values(const mt::Tensor& t) { return t.contiguous().to_vector<float>(); }

mt::Tensor leaf(std::vector<float> v) { return mt::from_vector(v).requires_grad_(); }

}  // namespace

// add's backward hands the same gradient tensor to both inputs.
TEST(AccumulateGrad, OneGradientForTwoLeavesGivesTwoIndependentGrads) {
  mt::Tensor a = leaf({1, 2, 3}), b = leaf({4, 5, 6});
  mt::Tensor y = mt::add(a, b);
  y.backward(mt::from_vector(std::vector<float>{1, 2, 3}, {3}));
  EXPECT_FALSE(a.grad().shares_storage(b.grad()));
  a.grad().add_(a.grad());
  EXPECT_EQ(values(a.grad()), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(values(b.grad()), (std::vector<float>{1, 2, 3}));
}

// The caller's gradient reaches the leaf directly (a leaf as the root) or as a view (reshape's
// backward): the leaf must not keep the caller's memory.
TEST(AccumulateGrad, CallersGradientIsCopied) {
  mt::Tensor x = leaf({1, 2, 3, 4});
  mt::Tensor g = mt::from_vector(std::vector<float>{1, 1, 1, 1}, {4});
  x.backward(g);
  EXPECT_FALSE(x.grad().shares_storage(g));
  g.fill_(7.0);
  EXPECT_EQ(values(x.grad()), (std::vector<float>{1, 1, 1, 1}));

  mt::Tensor z = leaf({1, 2, 3, 4});
  mt::Tensor g2 = mt::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  z.reshape({2, 2}).backward(g2);
  EXPECT_FALSE(z.grad().shares_storage(g2));
  g2.fill_(0.0);
  EXPECT_EQ(values(z.grad()), (std::vector<float>{1, 2, 3, 4}));
}

// sum's backward gives an expanded (stride-0) view of one value: .grad must be a dense tensor.
TEST(AccumulateGrad, ExpandedGradientBecomesDense) {
  mt::Tensor x = leaf({1, 2, 3});
  mt::sum(x).backward();
  EXPECT_TRUE(x.grad().is_contiguous());
  x.grad().add_(mt::from_vector(std::vector<float>{0, 1, 2}, {3}));
  EXPECT_EQ(values(x.grad()), (std::vector<float>{1, 2, 3}));
}

// An adopted first gradient is then accumulated into in place by later backward passes; the
// graph's other leaf and the retained graph must not see those writes.
TEST(AccumulateGrad, LaterBackwardPassesAccumulateIntoIndependentGrads) {
  mt::Tensor a = leaf({1, 2}), b = leaf({3, 4});
  mt::Tensor y = mt::sum(mt::mul(mt::add(a, b), 2.0));
  y.backward(mt::Tensor(), /*retain_graph=*/true);
  y.backward(mt::Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_EQ(values(a.grad()), (std::vector<float>{6, 6}));
  EXPECT_EQ(values(b.grad()), (std::vector<float>{6, 6}));
  EXPECT_FALSE(a.grad().shares_storage(b.grad()));
}

// A leaf used twice gets the sum; a gradient that no one else holds is adopted and stays correct.
TEST(AccumulateGrad, FreshGradientsAreCorrect) {
  mt::Tensor x = leaf({1, 2, 3});
  mt::Tensor y = mt::add(mt::mul(x, x), x);
  y.backward(mt::from_vector(std::vector<float>{1, 1, 1}, {3}));
  EXPECT_EQ(values(x.grad()), (std::vector<float>{3, 5, 7}));
  EXPECT_TRUE(x.grad().is_contiguous());
  EXPECT_FALSE(x.grad().requires_grad());
}

// A 16-bit gradient arriving at an fp32 leaf is converted (never adopted in the wrong dtype).
TEST(AccumulateGrad, GradientOfAnotherDtypeIsConverted) {
  mt::Tensor x = leaf({1, 2});
  mt::Tensor y = x.to(mt::kBFloat16);
  y.backward(mt::from_vector(std::vector<float>{1, 2}, {2}).to(mt::kBFloat16));
  EXPECT_EQ(x.grad().dtype(), mt::kFloat32);
  EXPECT_EQ(values(x.grad()), (std::vector<float>{1, 2}));
}

// The other side: a gradient that nothing else holds becomes .grad without a copy. mul's backward
// computes g * 2 into one new tensor, and that one allocation is all backward makes; a copy into
// .grad would be a second.
TEST(AccumulateGrad, UnsharedGradientIsAdoptedWithoutACopy) {
  mt::Tensor x = leaf({1, 2, 3, 4});
  mt::Tensor y = mt::mul(x, 2.0);
  const mt::Tensor g = mt::from_vector(std::vector<float>{1, 2, 3, 4}, {4});
  const mt::memory::Stats before = mt::memory::stats(mixtrain::testing::test_device());
  y.backward(g);
  const mt::memory::Stats after = mt::memory::stats(mixtrain::testing::test_device());
  EXPECT_EQ(values(x.grad()), (std::vector<float>{2, 4, 6, 8}));
  EXPECT_EQ(after.allocations - before.allocations, 1);
  EXPECT_EQ(after.current_bytes - before.current_bytes, static_cast<int64_t>(x.grad().nbytes()));
}
