// max_pool2d and avg_pool2d (src/ops/nn_pool.cpp, src/backends/cpu/kernels/nn_pool.cpp): known values with
// stride and padding, ties to the first maximum, gradients by finite differences, 16-bit runs
// against fp32, the 2x2 stride-2 fast path (every dtype and vector ISA, NaN, ties, odd sizes) and
// the general path against a reference loop, and the error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "mixtrain/nn/functional.h"
#include "ops/test_nn_helpers.h"

namespace mixtrain::testing {
namespace {

namespace F = nn::functional;

Tensor arange_image(int64_t h, int64_t w) {
  return arange(0.0, static_cast<double>(h * w), 1.0, {.dtype = kFloat32}).reshape({1, 1, h, w});
}

TEST(MaxPool2d, KnownValues) {
  const Tensor x = arange_image(4, 4);  // 0..15 row-major
  EXPECT_EQ(F::max_pool2d(x, {.kernel_h = 2, .kernel_w = 2}).to_vector<float>(), (std::vector<float>{5, 7, 13, 15}));
  // Stride 1, padding 1: windows hang over the border; padding never wins.
  const Tensor neg = arange(0.0, -16.0, -1.0, {.dtype = kFloat32}).reshape({1, 1, 4, 4});
  const Tensor y =
      F::max_pool2d(neg, {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .padding_h = 1, .padding_w = 1});
  EXPECT_EQ(y.shape(), Shape({1, 1, 2, 2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, -1, -4, -5}));
}

TEST(MaxPool2d, GradientGoesToFirstMaximumOnTies) {
  Tensor x = ones({1, 1, 2, 4}).requires_grad_();
  F::max_pool2d(x, {.kernel_h = 2, .kernel_w = 2}).backward(ones({1, 1, 1, 2}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{1, 0, 1, 0, 0, 0, 0, 0}));
  // Overlapping windows (stride 1) that share a maximum add their gradients there.
  Tensor z = from_vector<float>({0, 9, 0, 0}, {1, 1, 1, 4}).requires_grad_();
  F::max_pool2d(z, {.kernel_h = 1, .kernel_w = 2, .stride_h = 1, .stride_w = 1}).backward(ones({1, 1, 1, 3}));
  EXPECT_EQ(z.grad().to_vector<float>(), (std::vector<float>{0, 2, 1, 0}));
}

TEST(MaxPool2d, LargeWindowsSaveWideOffsets) {
  // A 17x17 window has more than 256 positions: the offsets no longer fit a byte.
  // Two 17x17 windows per plane (rows 0-16 and 1-17). Plane 0's maximum is at row 1, col 5 (in
  // both windows); plane 1's at row 16, col 16: offset 16 * 17 + 16 = 288 in the first window.
  std::vector<float> v(2 * 18 * 17, 0.0f);
  const int64_t at0 = 1 * 17 + 5, at1 = 18 * 17 + 16 * 17 + 16;
  v[at0] = 3.0f;
  v[at1] = 4.0f;
  Tensor x = from_vector<float>(v, {1, 2, 18, 17}).requires_grad_();
  Tensor y = F::max_pool2d(x, {.kernel_h = 17, .kernel_w = 17, .stride_h = 1, .stride_w = 1});
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{3, 3, 4, 4}));
  y.backward(from_vector<float>({1, 2, 3, 4}, {1, 2, 2, 1}));
  std::vector<float> expected(v.size(), 0.0f);
  expected[at0] = 1.0f + 2.0f;
  expected[at1] = 3.0f + 4.0f;
  EXPECT_EQ(x.grad().to_vector<float>(), expected);
}

// Reference max pooling on x's values: y and, for gradient gy, gx (first maximum in row-major
// window order, first NaN wins, padding never wins), gradients summed in output order in the opmath
// precision (fp32, fp64 for fp64).
struct PoolRef {
  std::vector<double> y, gx;
};
PoolRef max_pool_ref(const Tensor& x, const Tensor& gy, const F::Pool2dOptions& o) {
  const std::vector<double> xv = x.to(kFloat64).to_vector<double>(), gv = gy.to(kFloat64).to_vector<double>();
  const int64_t P = x.size(0) * x.size(1), H = x.size(2), W = x.size(3), OH = gy.size(2), OW = gy.size(3);
  const int64_t sh = o.stride_h ? o.stride_h : o.kernel_h, sw = o.stride_w ? o.stride_w : o.kernel_w;
  PoolRef r{std::vector<double>(gv.size()), std::vector<double>(xv.size(), 0.0)};
  for (int64_t pl = 0; pl < P; ++pl) {
    for (int64_t oh = 0; oh < OH; ++oh) {
      for (int64_t ow = 0; ow < OW; ++ow) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t at = -1;
        for (int64_t i = 0; i < o.kernel_h * o.kernel_w; ++i) {
          const int64_t h = oh * sh - o.padding_h + i / o.kernel_w, w = ow * sw - o.padding_w + i % o.kernel_w;
          if (h < 0 || h >= H || w < 0 || w >= W) continue;
          const double v = xv[(pl * H + h) * W + w];
          if (at < 0 || (!std::isnan(best) && (v > best || std::isnan(v)))) best = v, at = (pl * H + h) * W + w;
        }
        const int64_t out = (pl * OH + oh) * OW + ow;
        r.y[out] = best;
        r.gx[at] = x.dtype() == kFloat64
                       ? r.gx[at] + gv[out]
                       : static_cast<float>(static_cast<float>(r.gx[at]) + static_cast<float>(gv[out]));
      }
    }
  }
  return r;
}

void expect_same_values(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
    } else {
      EXPECT_EQ(got[i], want[i]) << "at " << i;
    }
  }
}

// Inputs with many ties (small integers), NaNs and infinities; every value exact in 16 bits.
Tensor awkward_input(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  std::vector<float> v = rand(shape, {}, &g).reshape({-1}).to_vector<float>();
  for (float& e : v) {
    const int bucket = static_cast<int>(e * 64.0f);
    e = bucket == 0   ? std::numeric_limits<float>::quiet_NaN()
        : bucket == 1 ? -std::numeric_limits<float>::infinity()
        : bucket == 2 ? std::numeric_limits<float>::infinity()
                      : static_cast<float>(bucket % 5) - 2.0f;
  }
  return from_vector<float>(v, shape);
}

TEST(MaxPool2d, MatchesReferenceEveryDtypeIsaAndWindow) {
  const F::Pool2dOptions options[] = {
      {.kernel_h = 2, .kernel_w = 2},  // the 2x2 stride-2 fast path
      {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .padding_h = 1, .padding_w = 1},
      {.kernel_h = 2, .kernel_w = 3, .stride_h = 1, .stride_w = 2, .padding_h = 1, .padding_w = 0},
  };
  // Odd sizes (floor rounding drops the last row / column), a row of more than 16 windows (vector
  // tail), a single window.
  const Shape shapes[] = {{2, 3, 7, 9}, {1, 2, 6, 70}, {1, 1, 2, 2}, {3, 5, 14, 14}};
  // Every vector level this CPU reaches under the cap (the AVX-512 2x2 path among them where it can
  // run); the generic loops always.
  for (cpu::Isa level : kernel_isa_levels()) {
    cpu::MaxIsaGuard cap(level);
    for (const auto& o : options) {
      for (const Shape& shape : shapes) {
        if (shape[2] + 2 * o.padding_h < o.kernel_h || shape[3] + 2 * o.padding_w < o.kernel_w) continue;
        for (DType dt : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
          SCOPED_TRACE(::testing::Message() << "isa " << cpu::to_string(level) << ", kernel " << o.kernel_h << "x"
                                            << o.kernel_w << ", " << shape << ", " << to_string(dt));
          Tensor x = awkward_input(shape, 7).to(dt).requires_grad_();
          Tensor y = F::max_pool2d(x, o);
          const Tensor gy = randn32(y.shape(), 8).to(dt);
          y.backward(gy);
          const PoolRef ref = max_pool_ref(x, gy, o);
          EXPECT_EQ(y.dtype(), dt);
          expect_same_values(y.to(kFloat64).to_vector<double>(), ref.y);
          EXPECT_EQ(x.grad().dtype(), dt);
          // Overlapping windows add their gradients in opmath and round once.
          expect_same_values(x.grad().to(kFloat64).to_vector<double>(),
                             from_vector<double>(ref.gx, shape).to(dt).to(kFloat64).to_vector<double>());
        }
      }
    }
  }
}

TEST(MaxPool2d, SixteenBitValuesAreCopiedBitForBit) {
  // A signalling-NaN payload and negative zero survive: the maximum is copied, never converted. 16
  // windows in a row, so that the vector kernels (8 or 16 windows a step) run too.
  for (cpu::Isa level : kernel_isa_levels()) {
    cpu::MaxIsaGuard cap(level);
    for (DType dt : kHalfDTypes) {
      const uint16_t snan = dt == kBFloat16 ? 0x7f81 : 0x7c01, neg_zero = 0x8000;
      Tensor x = zeros({1, 1, 2, 32}, {.dtype = dt, .device = Device{}});
      uint16_t* p = reinterpret_cast<uint16_t*>(x.raw_data());
      p[0] = neg_zero, p[1] = neg_zero, p[32] = neg_zero, p[33] = neg_zero;  // window 0: all -0
      p[3] = snan;                                                           // window 1: a NaN
      p[32 + 28] = snan;                                                     // window 14: a NaN below
      Tensor y = F::max_pool2d(x.to(default_device()), {.kernel_h = 2, .kernel_w = 2}).to(Device{});
      const uint16_t* q = reinterpret_cast<const uint16_t*>(y.raw_data());
      SCOPED_TRACE(::testing::Message() << "isa " << cpu::to_string(level) << ", " << to_string(dt));
      EXPECT_EQ(q[0], neg_zero);
      EXPECT_EQ(q[1], snan);
      EXPECT_EQ(q[14], snan);
      EXPECT_EQ(q[15], 0);
    }
  }
}

TEST(AvgPool2d, KnownValuesCountPadding) {
  const Tensor x = arange_image(4, 4);
  EXPECT_EQ(F::avg_pool2d(x, {.kernel_h = 2, .kernel_w = 2}).to_vector<float>(),
            (std::vector<float>{2.5, 4.5, 10.5, 12.5}));
  // Corner window with padding 1 covers x[0..1, 0..1] = {0, 1, 4, 5}; the divisor counts padding: 9.
  const Tensor y =
      F::avg_pool2d(x, {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .padding_h = 1, .padding_w = 1});
  EXPECT_FLOAT_EQ(y.to_vector<float>()[0], 10.0f / 9.0f);
}

TEST(Pool2d, GradcheckStridePadding) {
  const F::Pool2dOptions options[] = {
      {.kernel_h = 2, .kernel_w = 2},
      {.kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1, .padding_h = 1, .padding_w = 1},
      {.kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 1, .padding_h = 1, .padding_w = 0},
  };
  for (const auto& o : options) {
    SCOPED_TRACE("kernel " + std::to_string(o.kernel_h) + "x" + std::to_string(o.kernel_w));
    Tensor x = rand_input({2, 2, 5, 6}, -1.0, 1.0, 1);
    EXPECT_EQ(gradcheck([&](const std::vector<Tensor>& in) { return F::max_pool2d(in[0], o); }, {x}), "");
    EXPECT_EQ(gradcheck([&](const std::vector<Tensor>& in) { return F::avg_pool2d(in[0], o); }, {x}), "");
  }
}

TEST(Pool2d, HalfMatchesFp32) {
  const F::Pool2dOptions o{.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .padding_h = 1, .padding_w = 1};
  for (DType dt : testing::kHalfDTypes) {
    const Tensor x = randn32({2, 3, 9, 8}, 2);
    testing::expect_half_matches_fp32([&](const std::vector<Tensor>& in) { return F::max_pool2d(in[0], o); }, {x}, dt,
                                      testing::vs_fp32(dt));
    testing::expect_half_matches_fp32([&](const std::vector<Tensor>& in) { return F::avg_pool2d(in[0], o); }, {x}, dt,
                                      testing::vs_fp32(dt));
  }
}

TEST(Pool2d, Errors) {
  expect_error([] { F::max_pool2d(zeros({1, 4, 4}), {.kernel_h = 2, .kernel_w = 2}); }, {"max_pool2d", "[1, 4, 4]"});
  expect_error(
      [] {
        F::avg_pool2d(zeros({1, 1, 4, 4}), {.kernel_h = 2, .kernel_w = 2, .padding_h = 2});
      },
      {"avg_pool2d", "padding"});
  expect_error([] { F::max_pool2d(zeros({1, 1, 2, 2}), {.kernel_h = 3, .kernel_w = 3}); }, {"max_pool2d", "larger"});
  expect_error([] { F::avg_pool2d(zeros({1, 1, 4, 4}), {.kernel_h = 0, .kernel_w = 2}); }, {"avg_pool2d", "kernel"});
}

}  // namespace
}  // namespace mixtrain::testing
