// Reductions (include/mixtrain/ops/reduce.h): values against a naive fp64 reference for every
// subset of dims, fp64 finite-difference gradients, 16-bit against fp32, integer sums, accuracy of
// long sums, bitwise independence of the thread count, argmax, sum_to, and error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mixtrain/mixtrain.h"
#include "ops/test_nn_helpers.h"
#include "support/checked_device.h"
#include "support/gradcheck.h"
#include "support/tolerances.h"

namespace mt = mixtrain;
using mt::testing::expect_error;
using mt::testing::gradcheck;
using mt::testing::rand_input;
using mt::testing::vs_fp32;

namespace {

using V = std::vector<double>;
using Inputs = std::vector<mt::Tensor>;

mt::Tensor uniform(const mt::Shape& shape, double lo, double hi, uint64_t seed, mt::DType dt = mt::kFloat32) {
  return rand_input(shape, lo, hi, seed).detach().to(dt);
}

// Naive reference: sum / mean / max of `x` over the dims flagged in `mask`, in fp64, in the
// row-major order of the kept dims.
V naive(const mt::Tensor& x, unsigned mask, int op) {
  const V v = x.to_vector<double>();
  const mt::Shape& s = x.shape();
  const int nd = s.size();
  mt::Shape out_shape, out_strides;
  for (int d = 0; d < nd; ++d) out_shape.push_back((mask >> d) & 1 ? 1 : s[d]);
  out_strides = mt::contiguous_strides(out_shape);
  V acc(out_shape.numel(), op == 2 ? -INFINITY : 0.0);
  std::vector<int64_t> idx(nd, 0);
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
    int64_t rem = i, o = 0;
    for (int d = nd - 1; d >= 0; --d) {
      idx[d] = rem % s[d];
      rem /= s[d];
      if (!((mask >> d) & 1)) o += idx[d] * out_strides[d];
    }
    acc[o] = op == 2 ? std::max(acc[o], v[i]) : acc[o] + v[i];
  }
  if (op == 1) {
    const double n = static_cast<double>(x.numel()) / static_cast<double>(acc.size());
    for (double& a : acc) a /= n;
  }
  return acc;
}

TEST(ReduceValues, EveryDimSubsetMatchesNaiveReference) {
  for (const mt::Shape& shape : {mt::Shape{2, 3, 4}, mt::Shape{5, 1, 6}, mt::Shape{3, 4, 2, 5}}) {
    // Contiguous, and the same shape as a permuted (non-contiguous) view.
    mt::Shape reversed, rdims;
    for (int d = shape.size() - 1; d >= 0; --d) reversed.push_back(shape[d]), rdims.push_back(d);
    for (const mt::Tensor& x :
         {uniform(shape, -1, 1, 3, mt::kFloat64), uniform(reversed, -1, 1, 3, mt::kFloat64).permute(rdims)}) {
      const int nd = shape.size();
      for (unsigned mask = 0; mask < (1u << nd); ++mask) {
        mt::Shape dims;
        for (int d = 0; d < nd; ++d)
          if ((mask >> d) & 1) dims.push_back(d - (d % 2) * nd);  // odd dims given as negative
        const unsigned eff = mask == 0 ? (1u << nd) - 1 : mask;   // empty dims: all
        for (bool keepdim : {false, true}) {
          SCOPED_TRACE(shape.str() + " dims " + dims.str() + (keepdim ? " keepdim" : ""));
          mt::Tensor s = mt::sum(x, dims, keepdim), m = mt::mean(x, dims, keepdim), a = mt::amax(x, dims, keepdim);
          int expected_dims = keepdim ? nd : nd - __builtin_popcount(eff);
          EXPECT_EQ(s.dim(), expected_dims);
          const V rs = naive(x, eff, 0), rm = naive(x, eff, 1), ra = naive(x, eff, 2);
          const V vs = s.to_vector<double>(), vm = m.to_vector<double>(), va = a.to_vector<double>();
          ASSERT_EQ(vs.size(), rs.size());
          for (size_t i = 0; i < rs.size(); ++i) {
            EXPECT_NEAR(vs[i], rs[i], 1e-12);
            EXPECT_NEAR(vm[i], rm[i], 1e-12);
            EXPECT_EQ(va[i], ra[i]);
          }
        }
      }
    }
  }
}

TEST(ReduceValues, NonContiguousInputs) {
  // A transposed view is read in memory order (no copy): same values as its contiguous copy, up to
  // the summation order.
  const mt::Tensor x = uniform({30, 40}, -1, 1, 4);
  const mt::Tensor xt = x.t();
  for (const mt::Shape& dims : {mt::Shape{0}, mt::Shape{1}, mt::Shape{}}) {
    EXPECT_CLOSE(mt::sum(xt, dims), mt::sum(xt.contiguous(), dims), mt::testing::kFp32VsReference);
    EXPECT_EQ(mt::amax(xt, dims).to_vector<float>(), mt::amax(xt.contiguous(), dims).to_vector<float>());
  }
  // A strided slice (not a permutation of a contiguous tensor) is copied first.
  const mt::Tensor s = x.slice(1, 0, 40, 3);
  EXPECT_EQ(mt::sum(s, {1}).to_vector<float>(), mt::sum(s.contiguous(), {1}).to_vector<float>());
}

TEST(ReduceValues, IntegerAndBoolSums) {
  mt::Tensor i = mt::arange(100);
  EXPECT_EQ(mt::sum(i).dtype(), mt::kInt64);
  EXPECT_EQ(mt::sum(i).item<int64_t>(), 4950);
  mt::Tensor i32 = mt::arange(0.0, 12.0, 1.0, {.dtype = mt::kInt32}).reshape({3, 4});
  EXPECT_EQ(mt::sum(i32, {1}).to_vector<int64_t>(), (std::vector<int64_t>{6, 22, 38}));
  EXPECT_EQ(mt::sum(i32, {0}).to_vector<int64_t>(), (std::vector<int64_t>{12, 15, 18, 21}));
  EXPECT_EQ(mt::sum(mt::gt(i, 89.5)).item<int64_t>(), 10);
  EXPECT_EQ(mt::mean(i, {}, false, mt::kFloat32).item<float>(), 49.5f);
  EXPECT_EQ(mt::sum(i, {}, false, mt::kFloat64).item<double>(), 4950.0);
  expect_error([&] { (void)(mt::mean(i)); }, {"mean"});
}

TEST(ReduceValues, OutputDtypes) {
  mt::Tensor bf = uniform({64, 100}, -1, 1, 5, mt::kBFloat16);
  EXPECT_EQ(mt::sum(bf).dtype(), mt::kBFloat16);
  // sum(dtype=float32) stores the fp32 accumulator directly: bitwise the fp32 sum of the same values.
  mt::Tensor wide = mt::sum(bf, {1}, false, mt::kFloat32);
  EXPECT_EQ(wide.dtype(), mt::kFloat32);
  EXPECT_EQ(wide.to_vector<float>(), mt::sum(bf.to(mt::kFloat32), {1}).to_vector<float>());
  EXPECT_EQ(mt::mean(bf, {0}, true, mt::kFloat32).to_vector<float>(),
            mt::mean(bf.to(mt::kFloat32), {0}, true).to_vector<float>());
  EXPECT_EQ(mt::sum(bf, {}, false, mt::kFloat64).dtype(), mt::kFloat64);
  mt::Tensor x = mt::full({3}, 2.0, {.dtype = mt::kBFloat16, .requires_grad = true});
  mt::sum(x, {}, false, mt::kFloat32).backward();
  EXPECT_EQ(x.grad().dtype(), mt::kBFloat16);
}

TEST(ReduceValues, EmptyInputs) {
  mt::Tensor e = mt::zeros({0, 3});
  EXPECT_EQ(mt::sum(e, {0}).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(mt::sum(e).item<float>(), 0.0f);
  EXPECT_TRUE(std::isnan(mt::mean(e).item<float>()));
  EXPECT_EQ(mt::sum(e, {1}).numel(), 0);
  expect_error([&] { (void)(mt::amax(e)); }, {"amax"});
  EXPECT_EQ(mt::amax(e, {1}).numel(), 0);
}

TEST(ReduceValues, MaxPropagatesNaN) {
  mt::Tensor x = mt::from_vector(std::vector<float>{1, NAN, 3, 4, 5, 6}, {2, 3});
  std::vector<float> rows = mt::amax(x, {1}).to_vector<float>();
  EXPECT_TRUE(std::isnan(rows[0]));
  EXPECT_EQ(rows[1], 6.0f);
  std::vector<float> cols = mt::max(x, {0}).to_vector<float>();
  EXPECT_TRUE(std::isnan(cols[1]));
  EXPECT_EQ(cols[2], 6.0f);
}

// ---- Gradients ----

TEST(ReduceGrad, SumAndMeanOverSeveralDims) {
  const std::vector<mt::Shape> dim_sets = {{}, {0}, {-1}, {1, 2}, {0, 2}, {2, 0, 1}};
  for (const mt::Shape& dims : dim_sets) {
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE(dims.str() + (keepdim ? " keepdim" : ""));
      Inputs in = {rand_input({2, 3, 4}, -1, 1, 6)};
      EXPECT_EQ(gradcheck([&](const Inputs& x) { return mt::sum(x[0], dims, keepdim); }, in), "");
      EXPECT_EQ(gradcheck([&](const Inputs& x) { return mt::mean(x[0], dims, keepdim); }, in), "");
      EXPECT_EQ(gradcheck([&](const Inputs& x) { return mt::amax(x[0], dims, keepdim); }, in), "");
    }
  }
}

TEST(ReduceGrad, AmaxWithTies) {
  // Two-way ties: the central difference of a tied maximum is exactly 1/2, PyTorch's even split.
  mt::Tensor x = mt::from_vector(V{0.5, 0.9, 0.9, -0.2, 0.3, 0.3, 0.1, -0.4}, {2, 4}, {.dtype = mt::kFloat64});
  x.requires_grad_();
  EXPECT_EQ(gradcheck([](const Inputs& in) { return mt::amax(in[0], {1}); }, {x}), "");
  EXPECT_EQ(gradcheck([](const Inputs& in) { return mt::max(in[0], {1}, true); }, {x}), "");
  // Three-way tie: each position gets a third.
  mt::Tensor y = mt::from_vector(std::vector<float>{1, 3, 3, 3, 2}, {5}).requires_grad_();
  mt::amax(y).backward();
  const float third = 1.0f / 3.0f;
  EXPECT_EQ(y.grad().to_vector<float>(), (std::vector<float>{0, third, third, third, 0}));
}

TEST(ReduceGrad, SumTo) {
  for (const mt::Shape& target : {mt::Shape{3, 1}, mt::Shape{4}, mt::Shape{1, 3, 4}, mt::Shape{2, 1, 1}, mt::Shape{}}) {
    SCOPED_TRACE(target.str());
    EXPECT_EQ(gradcheck([&](const Inputs& x) { return mt::sum_to(x[0], target); }, {rand_input({2, 3, 4}, -1, 1, 8)}),
              "");
  }
  mt::Tensor x = mt::arange(0.0, 24.0, 1.0, {.dtype = mt::kFloat32}).reshape({2, 3, 4});
  EXPECT_EQ(mt::sum_to(x, {3, 1}).to_vector<float>(), (std::vector<float>{60, 92, 124}));
  EXPECT_EQ(mt::sum_to(x, {3, 1}).shape(), (mt::Shape{3, 1}));
  EXPECT_TRUE(mt::sum_to(x, {2, 3, 4}).is_same(x));
  expect_error([&] { (void)(mt::sum_to(x, {5})); }, {"sum_to"});
  expect_error([&] { (void)(mt::sum_to(x, {1, 1, 1, 1})); }, {"sum_to"});
}

TEST(ReduceGrad, BiasGradientOverTheBatch) {
  mt::Tensor x = uniform({300, 7}, -1, 1, 9);
  mt::Tensor b = mt::zeros({7}, {.requires_grad = true});
  mt::sum(mt::add(x, b)).backward();
  EXPECT_EQ(b.grad().to_vector<float>(), std::vector<float>(7, 300.0f));
}

// ---- 16-bit against fp32 ----

TEST(ReducePrecision, Reductions16BitMatchFp32) {
  const std::vector<std::pair<mt::Shape, mt::Shape>> cases = {
      {{64, 1000}, {1}}, {{1000, 64}, {0}}, {{8, 300, 20}, {1}}, {{50, 60}, {}}, {{4, 5, 6}, {0, 2}}};
  for (mt::DType dt : {mt::kBFloat16, mt::kFloat16}) {
    for (const auto& [shape, dims] : cases) {
      SCOPED_TRACE(std::string(mt::to_string(dt)) + " " + shape.str() + " dims " + dims.str());
      const mt::Tensor x32 = uniform(shape, -1, 1, 10, dt).to(mt::kFloat32);
      const mt::Tensor x16 = x32.to(dt);
      EXPECT_CLOSE(mt::sum(x16, dims), mt::sum(x32, dims), vs_fp32(dt));
      EXPECT_CLOSE(mt::mean(x16, dims), mt::mean(x32, dims), vs_fp32(dt));
      // A maximum is one of the inputs: exact.
      EXPECT_EQ(mt::amax(x16, dims).to_vector<float>(), mt::amax(x32, dims).to_vector<float>());
    }
  }
}

TEST(ReducePrecision, LongSumsStayAccurate) {
  // 10^7 copies of 0.1f: a sequential fp32 sum drifts by ~1e-3 relative; lanes + pairwise chunks
  // must stay within a few fp32 ulps of the exact sum.
  const int64_t n = 10'000'000;
  const double exact = static_cast<double>(0.1f) * n;
  EXPECT_NEAR(mt::sum(mt::full({n}, 0.1)).item<double>(), exact, exact * 1e-6);
  // The same down an outer dim (two-level row cascade).
  const std::vector<float> cols = mt::sum(mt::full({n / 4, 4}, 0.1), {0}).to_vector<float>();
  for (float c : cols) EXPECT_NEAR(c, exact / 4, exact / 4 * 1e-5);
  // bf16 storage, fp32 accumulation: 10^6 ones is exact in fp32 and rounds once to bf16.
  mt::Tensor ones = mt::ones({1'000'000}, {.dtype = mt::kBFloat16});
  EXPECT_EQ(mt::sum(ones).item<float>(), static_cast<float>(mt::bfloat16(1e6f)));
  EXPECT_EQ(mt::sum(ones, {}, false, mt::kFloat32).item<float>(), 1e6f);
}

TEST(ReducePrecision, ResultsDoNotDependOnThreadCount) {
  const mt::Tensor big = uniform({3'000'001}, -1, 1, 11);
  const mt::Tensor grad = uniform({4096, 768}, -1, 1, 12);
  const mt::Tensor tall = uniform({200'000, 7}, -1, 1, 13);
  const mt::Tensor wide = uniform({3, 400'000}, -1, 1, 14);
  auto run = [&](int threads) {
    return mt::testing::with_threads(threads, [&] {
      return std::vector<mt::Tensor>{mt::sum(big),
                                     mt::mean(big),
                                     mt::sum(big.to(mt::kBFloat16), {}, false, mt::kFloat32),
                                     mt::sum(grad, {0}),
                                     mt::sum(tall, {0}),
                                     mt::sum(wide, {1}),
                                     mt::amax(tall, {0}),
                                     mt::sum(grad.reshape({64, 64, 768}), {0, 2})};
    });
  };
  const std::vector<mt::Tensor> one = run(1), two = run(2), four = run(4);
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_TRUE(mt::testing::bitwise_equal(one[i], two[i])) << "result " << i;
    EXPECT_TRUE(mt::testing::bitwise_equal(one[i], four[i])) << "result " << i;
  }
  EXPECT_NEAR(one[0].item<double>(), mt::sum(big.to(mt::kFloat64)).item<double>(), 1e-3);
}

// ---- argmax ----

TEST(ReduceArgmax, ValuesTiesAndNaN) {
  mt::Tensor x = mt::from_vector(std::vector<float>{1, 5, 5, 2, 9, 0, 3, 9}, {2, 4});
  EXPECT_EQ(mt::argmax(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));  // first of the ties
  EXPECT_EQ(mt::argmax(x, -1, true).shape(), (mt::Shape{2, 1}));
  EXPECT_EQ(mt::argmax(x, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 1}));
  EXPECT_EQ(mt::argmax(x, 1).dtype(), mt::kInt64);
  mt::Tensor n = mt::from_vector(std::vector<float>{1, NAN, 7, NAN}, {4});
  EXPECT_EQ(mt::argmax(n, 0).item<int64_t>(), 1);  // NaN is the maximum, as in PyTorch
  EXPECT_EQ(mt::argmax(x.to(mt::kBFloat16), 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(mt::argmax(mt::from_vector(std::vector<int64_t>{3, -1, 8, 8}), 0).item<int64_t>(), 2);
  expect_error([&] { (void)(mt::argmax(x, 2)); }, {"argmax"});
}

// ---- Errors ----

TEST(ReduceErrors, MessagesNameTheOp) {
  mt::Tensor x = mt::ones({2, 3});
  expect_error([&] { (void)(mt::sum(x, {2})); }, {"sum", "out of range"});
  expect_error([&] { (void)(mt::mean(x, {-3})); }, {"mean"});
  expect_error([&] { (void)(mt::amax(x, {0, 0})); }, {"amax"});
  expect_error([&] { (void)(mt::sum(x, {1, -1})); }, {"more than once"});
  expect_error([&] { (void)(mt::amax(mt::arange(3))); }, {"amax"});
  expect_error([&] { (void)(mt::sum(mt::Tensor())); }, {"sum"});
}

}  // namespace

namespace {

// first_non_finite: the index of the first tensor holding inf or NaN, read-only.
TEST(FirstNonFinite, NamesTheFirstTensorAndChangesNothing) {
  const mt::Device dev = mt::testing::test_device();
  mt::Tensor a = mt::ones({5}, {.device = dev}), b = mt::full({3, 4}, 2.0, {.dtype = mt::kBFloat16, .device = dev});
  mt::Tensor c = mt::zeros({7}, {.dtype = mt::kFloat16, .device = dev});
  EXPECT_EQ(mt::first_non_finite({}), -1);
  EXPECT_EQ(mt::first_non_finite({a, b, c}), -1);
  c.narrow(0, 6, 1).fill_(std::nan(""));
  b.narrow(1, 2, 1).fill_(INFINITY);
  const uint64_t va = a.version(), vb = b.version(), vc = c.version();
  // Undefined and empty tensors are skipped but keep their places in the numbering.
  EXPECT_EQ(mt::first_non_finite({a, mt::Tensor(), mt::zeros({0}, {.device = dev}), c, b}), 3);
  EXPECT_EQ(mt::first_non_finite({a, b.t(), c}), 1) << "a strided view is read in place";
  EXPECT_EQ(a.version(), va);
  EXPECT_EQ(b.version(), vb);
  EXPECT_EQ(c.version(), vc);
  EXPECT_EQ(c.to_vector<float>()[6] != c.to_vector<float>()[6], true) << "the NaN is still there";
  expect_error([&] { mt::first_non_finite({a, mt::ones({2}, {.dtype = mt::kInt32, .device = dev})}); },
               {"first_non_finite", "int32"});
  if (dev.is_cpu()) return;
  expect_error([&] { mt::first_non_finite({a, mt::ones({2}, {.device = mt::Device{}})}); }, {"first_non_finite", "one device"});
}

}  // namespace
