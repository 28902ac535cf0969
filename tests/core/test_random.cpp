// Seeded, counter-based random numbers (include/mixtrain/random.h, src/core/factory.cpp): the values
// depend only on (seed, offset, index), never on the thread count, and have the right distribution.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "mixtrain/mixtrain.h"
#include "support/cpu_env.h"

namespace mt = mixtrain;

namespace {

bool bitwise_equal(const mt::Tensor& a, const mt::Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.is_contiguous() && b.is_contiguous() &&
         std::memcmp(a.to(mt::Device{}).raw_data(), b.to(mt::Device{}).raw_data(), a.nbytes()) == 0;
}

TEST(Random, SameSeedSameValues) {
  for (mt::DType dt : {mt::kFloat32, mt::kFloat64, mt::kBFloat16, mt::kFloat16}) {
    mt::Generator g1(42), g2(42);
    EXPECT_TRUE(bitwise_equal(mt::rand({1000}, {.dtype = dt}, &g1), mt::rand({1000}, {.dtype = dt}, &g2))) << dt;
    EXPECT_TRUE(bitwise_equal(mt::randn({1000}, {.dtype = dt}, &g1), mt::randn({1000}, {.dtype = dt}, &g2))) << dt;
  }
  mt::Generator g1(7), g2(7);
  EXPECT_TRUE(bitwise_equal(mt::randint(0, 100, {1000}, {.dtype = mt::kInt64}, &g1),
                            mt::randint(0, 100, {1000}, {.dtype = mt::kInt64}, &g2)));
  // The process-wide generator reseeds the same way.
  mt::manual_seed(123);
  mt::Tensor a = mt::randn({100});
  mt::manual_seed(123);
  EXPECT_TRUE(bitwise_equal(a, mt::randn({100})));
}

TEST(Random, DifferentSeedsDiffer) {
  mt::Generator g1(1), g2(2);
  std::vector<float> a = mt::rand({1000}, {}, &g1).to_vector<float>();
  std::vector<float> b = mt::rand({1000}, {}, &g2).to_vector<float>();
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  EXPECT_LT(same, 5);  // 24-bit values: a coincidence has probability 2^-24 each
}

TEST(Random, SuccessiveDrawsAdvanceTheOffset) {
  mt::Generator g(5);
  mt::Tensor a = mt::rand({10}, {}, &g);
  EXPECT_EQ(g.offset(), 3u);  // ceil(10 / 4) Philox blocks, four 32-bit values each
  mt::Tensor b = mt::rand({10}, {}, &g);
  EXPECT_EQ(g.offset(), 6u);
  EXPECT_FALSE(bitwise_equal(a, b));
  mt::randn({10}, {}, &g);  // one block per normal value (Box-Muller uses 4 x 32 bits)
  EXPECT_EQ(g.offset(), 16u);
  // Rewinding the offset replays the stream; the state round-trips.
  auto state = g.state();
  g.set_offset(0);
  EXPECT_TRUE(bitwise_equal(mt::rand({10}, {}, &g), a));
  g.set_state(state);
  EXPECT_EQ(g.offset(), 16u);
  EXPECT_EQ(g.seed(), 5u);
}

TEST(Random, IndependentOfTheThreadCount) {
  // Large enough for parallel_for to split the work across threads (it splits above 2048 Philox
  // blocks, i.e. 8192 uniform or 2048 normal values).
  const mt::Shape shape{1 << 18};
  auto draw_all = [&](int threads) {
    return mt::testing::with_threads(threads, [&] {
      mt::Generator g(2024);
      std::vector<mt::Tensor> out;
      for (mt::DType dt : {mt::kFloat32, mt::kFloat64, mt::kBFloat16, mt::kFloat16}) {
        out.push_back(mt::rand(shape, {.dtype = dt}, &g));
        out.push_back(mt::randn(shape, {.dtype = dt}, &g));
      }
      out.push_back(mt::randint(-1000, 1000, shape, {.dtype = mt::kInt64}, &g));
      out.push_back(mt::randint(0, 7, shape, {.dtype = mt::kInt32}, &g));
      return out;
    });
  };
  std::vector<mt::Tensor> one = draw_all(1);
  std::vector<mt::Tensor> two = draw_all(2);
  std::vector<mt::Tensor> four = draw_all(4);
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(one[i], two[i])) << "draw " << i << " differs between 1 and 2 threads";
    EXPECT_TRUE(bitwise_equal(one[i], four[i])) << "draw " << i << " differs between 1 and 4 threads";
  }
}

TEST(Random, UniformIsInZeroOneForEveryFloatDType) {
  const int64_t n = 1'000'000;
  for (mt::DType dt : {mt::kFloat32, mt::kFloat64, mt::kBFloat16, mt::kFloat16}) {
    SCOPED_TRACE(mt::to_string(dt));
    mt::Generator g(11);
    std::vector<double> v = mt::rand({n}, {.dtype = dt}, &g).to_vector<double>();
    double lo = 1, hi = 0, sum = 0;
    for (double x : v) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      sum += x;
    }
    // Without care, 16-bit rounding would turn the top 2^-9 (bf16) of [0, 1) into exactly 1.
    EXPECT_GE(lo, 0.0);
    EXPECT_LT(hi, 1.0);
    EXPECT_LT(lo, 1e-3);
    EXPECT_GT(hi, 0.99);
    // The mean of n uniforms has standard deviation sqrt(1/12/n) = 2.9e-4; 16-bit rounding moves it
    // by less than 2^-10.
    EXPECT_NEAR(sum / n, 0.5, 5 * 2.9e-4 + (mt::is_reduced_float(dt) ? 1e-3 : 0.0));
  }
  // uniform_ honours its bounds.
  mt::Tensor t = mt::empty({10000}, {.dtype = mt::kBFloat16});
  mt::Generator g(3);
  mt::uniform_(t, -2.0, 3.0, &g);
  std::vector<float> v = t.to_vector<float>();
  EXPECT_GE(*std::min_element(v.begin(), v.end()), -2.0f);
  EXPECT_LT(*std::max_element(v.begin(), v.end()), 3.0f);
}

TEST(Random, NormalMomentsWithinStatisticalBounds) {
  const int64_t n = 1'000'000;
  for (mt::DType dt : {mt::kFloat32, mt::kFloat64, mt::kBFloat16}) {
    SCOPED_TRACE(mt::to_string(dt));
    mt::Generator g(99);
    std::vector<double> v = mt::randn({n}, {.dtype = dt}, &g).to_vector<double>();
    double sum = 0, sq = 0;
    int64_t within_one = 0;
    for (double x : v) {
      sum += x;
      sq += x * x;
      within_one += std::abs(x) < 1.0;
    }
    const double mean = sum / n, std = std::sqrt(sq / n - mean * mean);
    // Standard errors: mean 1/sqrt(n) = 1e-3; std 1/sqrt(2n) = 7.1e-4; P(|x|<1) = 0.6827 with
    // sqrt(p(1-p)/n) = 4.7e-4. Five of them each (bf16 rounding adds < 2^-9 relative to std).
    EXPECT_NEAR(mean, 0.0, 5e-3);
    EXPECT_NEAR(std, 1.0, 5 * 7.1e-4 + (dt == mt::kBFloat16 ? 2e-3 : 0.0));
    EXPECT_NEAR(static_cast<double>(within_one) / n, 0.682689, 5 * 4.7e-4 + (dt == mt::kBFloat16 ? 4e-3 : 0.0));
  }
  mt::Tensor t = mt::empty({100000});
  mt::Generator g(4);
  mt::normal_(t, 10.0, 0.5, &g);
  std::vector<double> v = t.to_vector<double>();
  double sum = 0;
  for (double x : v) sum += x;
  EXPECT_NEAR(sum / v.size(), 10.0, 5 * 0.5 / std::sqrt(1e5));
}

TEST(Random, RandintCoversExactlyTheRange) {
  const int64_t n = 100000;
  mt::Generator g(8);
  mt::Tensor t = mt::randint(-3, 5, {n}, {.dtype = mt::kInt64}, &g);
  EXPECT_EQ(t.dtype(), mt::kInt64);
  std::vector<int64_t> counts(8, 0);
  for (int64_t x : t.to_vector<int64_t>()) {
    ASSERT_GE(x, -3);
    ASSERT_LT(x, 5);
    ++counts[x + 3];
  }
  // Each value has probability 1/8: expected 12500, standard deviation sqrt(n p (1-p)) = 105.
  for (int64_t c : counts) EXPECT_NEAR(c, 12500, 5 * 105);
  EXPECT_EQ(mt::randint(4, 5, {100}, {.dtype = mt::kInt32}, &g).to_vector<int32_t>(), std::vector<int32_t>(100, 4));
  EXPECT_THROW(mt::randint(5, 5, {10}), mt::Error);
}

TEST(Random, PhiloxKnownAnswer) {
  // Random123's known-answer test for Philox-4x32-10 with counter 0 and key 0.
  auto r = mt::random::philox(0, 0);
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
}

}  // namespace
