#include <gtest/gtest.h>

#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;

TEST(Smoke, ViewsAndCopy) {
  mt::Tensor a = mt::arange(0.0, 6.0, 1.0, {.dtype = mt::kFloat32}).reshape({2, 3});
  mt::Tensor t = a.t().contiguous();
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  mt::Tensor b = a.to(mt::kBFloat16);
  EXPECT_EQ(b.dtype(), mt::kBFloat16);
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
}
