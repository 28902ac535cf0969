// matmul / bmm / linear forward: every oneDNN path (fp32, bf16 native and via fp32, fp16 via fp32)
// against the fp64 reference loop on the same inputs, for plain, transposed, strided, broadcast,
// 1-D and empty operands; error messages; the primitive cache.
#include <gtest/gtest.h>

#include "mixtrain/autograd.h"
#include "mixtrain/ops/linalg.h"
#include "ops/test_linalg_util.h"

namespace mixtrain::testing {
namespace {

// Runs once per GemmMode (fp32, bf16 native, bf16 via fp32, fp16); see test_linalg_util.h.
class MatmulModes : public GemmModeTest {
 protected:
  // Checks matmul(a, b) against the reference; `make` builds the operands in the mode's dtype.
  void check_matmul(const std::function<std::pair<Tensor, Tensor>(DType)>& make) {
    const DType dt = GetParam().dtype;
    auto [a, b] = make(dt);
    Tensor c = matmul(a, b);
    EXPECT_EQ(c.dtype(), dt);
    Tensor expected = ref_matmul(a, b);
    ASSERT_EQ(c.shape(), expected.shape());
    EXPECT_CLOSE(c, expected, gemm_tol(dt));
  }
};
INSTANTIATE_TEST_SUITE_P(Modes, MatmulModes, ::testing::ValuesIn(kGemmModes), gemm_mode_name);

TEST_P(MatmulModes, Plain2DAgainstReference) {
  for (auto [n, k, m] : {std::tuple{1, 1, 1}, {7, 13, 5}, {64, 128, 96}, {33, 257, 65}}) {
    SCOPED_TRACE(::testing::Message() << n << "x" << k << " @ " << k << "x" << m);
    check_matmul([&](DType dt) { return std::pair{uniform_input({n, k}, dt, 1), uniform_input({k, m}, dt, 2)}; });
  }
}

TEST_P(MatmulModes, TransposedOperandsAreReadInPlace) {
  // a.t() and b.t() are column-major views; each combination must match and must not fall back to
  // oneDNN's reference kernel.
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE(::testing::Message() << "transpose a " << ta << ", b " << tb);
      auto make = [&](DType dt) {
        Tensor a = ta ? uniform_input({40, 30}, dt, 3).t() : uniform_input({30, 40}, dt, 3);
        Tensor b = tb ? uniform_input({20, 40}, dt, 4).t() : uniform_input({40, 20}, dt, 4);
        return std::pair{a, b};
      };
      check_matmul(make);
      const DType dt = GetParam().onednn_dtype();  // the primitive this mode runs
      auto [a, b] = make(dt);
      std::string impl = kernels::matmul_impl_info(a, b, Tensor(), Tensor::empty({30, 20}, dt));
      EXPECT_EQ(impl.rfind("ref", 0), std::string::npos) << to_string(dt) << " runs " << impl;
    }
  }
}

TEST_P(MatmulModes, NonContiguousOperands) {
  // Rows with a gap (a padded leading dimension), a stepped column slice (needs a copy), a permuted
  // batch and an expanded (stride-0) batch.
  check_matmul([](DType dt) {
    Tensor a = uniform_input({24, 50}, dt, 5).narrow(1, 3, 17);  // row stride 50, 17 columns
    Tensor b = uniform_input({17, 9}, dt, 6);
    return std::pair{a, b};
  });
  check_matmul([](DType dt) {
    Tensor a = uniform_input({12, 34}, dt, 7).slice(1, 0, 34, 2);  // column stride 2
    Tensor b = uniform_input({9, 17}, dt, 8).t();
    return std::pair{a, b};
  });
  check_matmul([](DType dt) {
    Tensor a = uniform_input({6, 3, 8}, dt, 9).permute({1, 0, 2});  // [3, 6, 8], batch stride 8
    Tensor b = uniform_input({3, 8, 5}, dt, 10);
    return std::pair{a, b};
  });
  check_matmul([](DType dt) {
    Tensor a = uniform_input({1, 6, 8}, dt, 11).expand({4, 6, 8});
    Tensor b = uniform_input({4, 8, 5}, dt, 12);
    return std::pair{a, b};
  });
}

TEST_P(MatmulModes, StridesOfFourKibAlongK) {
  // Below AVX-512 these operands are copied with a padded stride before the product (see
  // backends/cpu/kernels/onednn/matmul.cpp); elsewhere they are read in place. Either way the values must hold.
  check_matmul([](DType dt) {  // column-major A, column stride 1024 floats, N = 128
    return std::pair{uniform_input({64, 1024}, dt, 61).t(), uniform_input({64, 128}, dt, 62)};
  });
  check_matmul([](DType dt) {  // row-major B, row stride 1024 floats, M = 128
    return std::pair{uniform_input({128, 64}, dt, 63), uniform_input({64, 1024}, dt, 64)};
  });
  check_matmul([](DType dt) {  // both, each a strided slice of a wider buffer
    return std::pair{uniform_input({64, 1024}, dt, 65).narrow(1, 0, 128).t(),
                     uniform_input({64, 1024}, dt, 66).narrow(1, 0, 256)};
  });
  check_matmul([](DType dt) {  // 1008 rows in a 1024 stride: the copy's stride (1040) is not padded again
    return std::pair{uniform_input({64, 1024}, dt, 67).narrow(1, 0, 1008).t(), uniform_input({64, 128}, dt, 68)};
  });
}

TEST_P(MatmulModes, BroadcastBatchDims) {
  check_matmul([](DType dt) { return std::pair{uniform_input({2, 1, 5, 3}, dt, 13), uniform_input({4, 3, 6}, dt, 14)}; });
  check_matmul([](DType dt) { return std::pair{uniform_input({3, 5, 4}, dt, 15), uniform_input({4, 2}, dt, 16)}; });
  check_matmul([](DType dt) { return std::pair{uniform_input({5, 4}, dt, 17), uniform_input({3, 4, 2}, dt, 18)}; });
  // Batch and rows of a do not merge (transposed inner matrix): the batched path with a 2-D b.
  check_matmul([](DType dt) {
    return std::pair{uniform_input({3, 4, 5}, dt, 19).transpose(1, 2), uniform_input({4, 6}, dt, 20)};
  });
}

TEST_P(MatmulModes, OneDimensionalOperands) {
  check_matmul([](DType dt) { return std::pair{uniform_input({7}, dt, 21), uniform_input({7}, dt, 22)}; });
  check_matmul([](DType dt) { return std::pair{uniform_input({7}, dt, 23), uniform_input({7, 3}, dt, 24)}; });
  check_matmul([](DType dt) { return std::pair{uniform_input({3, 7}, dt, 25), uniform_input({7}, dt, 26)}; });
  check_matmul([](DType dt) { return std::pair{uniform_input({7}, dt, 27), uniform_input({2, 7, 3}, dt, 28)}; });
  check_matmul([](DType dt) { return std::pair{uniform_input({2, 3, 7}, dt, 29), uniform_input({7}, dt, 30)}; });
  EXPECT_EQ(matmul(uniform_input({4}, kFloat32, 1), uniform_input({4}, kFloat32, 2)).dim(), 0);
}

TEST(Matmul, EmptyOperands) {
  Tensor c = matmul(zeros({0, 3}), zeros({3, 4}));
  EXPECT_EQ(c.shape(), (Shape{0, 4}));
  Tensor d = matmul(zeros({2, 0}), zeros({0, 3}));  // empty inner dimension: zeros
  EXPECT_EQ(d.to_vector<float>(), std::vector<float>(6, 0.0f));
  Tensor e = linear(zeros({2, 0}), zeros({3, 0}), full({3}, 1.5));
  EXPECT_EQ(e.to_vector<float>(), std::vector<float>(6, 1.5f));
}

TEST(Matmul, Float64UsesTheReferenceLoop) {
  Tensor a = uniform_input({5, 6}, kFloat64, 31), b = uniform_input({6, 4}, kFloat64, 32);
  EXPECT_EQ(max_scaled_error(matmul(a, b), ref_matmul(a, b), {0, 0}), 0.0);
}

TEST_P(MatmulModes, BmmAgainstReference) {
  const DType dt = GetParam().dtype;
  Tensor a = uniform_input({3, 9, 16}, dt, 33), b = uniform_input({3, 16, 11}, dt, 34);
  EXPECT_CLOSE(bmm(a, b), ref_matmul(a, b), gemm_tol(dt));
  Tensor bt = uniform_input({3, 11, 16}, dt, 35).transpose(1, 2);
  EXPECT_CLOSE(bmm(a, bt), ref_matmul(a, bt), gemm_tol(dt));
}

TEST_P(MatmulModes, LinearAgainstReferenceWithAndWithoutBias) {
  const DType dt = GetParam().dtype;
  Tensor x = uniform_input({2, 5, 24}, dt, 36), w = uniform_input({10, 24}, dt, 37);
  Tensor b = uniform_input({10}, dt, 38);
  Tensor y = linear(x, w, b);
  EXPECT_EQ(y.shape(), (Shape{2, 5, 10}));
  EXPECT_EQ(y.dtype(), dt);
  EXPECT_CLOSE(y, ref_matmul(x, w.t(), b), gemm_tol(dt));
  EXPECT_CLOSE(linear(x, w), ref_matmul(x, w.t()), gemm_tol(dt));
  Tensor x1 = uniform_input({24}, dt, 39);  // 1-D input -> [out]
  EXPECT_CLOSE(linear(x1, w, b), ref_matmul(x1, w.t(), b), gemm_tol(dt));
  Tensor xs = uniform_input({5, 2, 24}, dt, 40).transpose(0, 1);  // rows do not merge: a copy
  EXPECT_CLOSE(linear(xs, w, b), ref_matmul(xs, w.t(), b), gemm_tol(dt));
}

TEST_P(MatmulModes, LinearBiasIsFusedIntoThePrimitive) {
  // Same shapes with and without bias are different primitives; both run oneDNN's fast kernels.
  const DType dt = GetParam().onednn_dtype();
  Tensor x = uniform_input({16, 32}, dt, 41), w = uniform_input({8, 32}, dt, 42), b = uniform_input({8}, dt, 43);
  std::string impl = kernels::matmul_impl_info(x, w.t(), b, Tensor::empty({16, 8}, dt));
  EXPECT_EQ(impl.rfind("ref", 0), std::string::npos) << impl;
}

TEST(LinalgErrors, MessagesNameTheOpAndShapes) {
  Tensor a = zeros({2, 3}), b = zeros({4, 5});
  expect_error([&] { matmul(a, b); }, {"matmul", "[2, 3]", "[4, 5]", "inner"});
  expect_error([&] { matmul(scalar_tensor(1.0), a); }, {"matmul", "at least 1 dimension"});
  expect_error([&] { matmul(zeros({2, 2, 3}), zeros({3, 3, 4})); }, {"matmul", "[2]", "[3]"});
  expect_error([&] { bmm(zeros({2, 3}), zeros({3, 4})); }, {"bmm", "3-D", "[2, 3]"});
  expect_error([&] { bmm(zeros({2, 2, 3}), zeros({3, 3, 4})); }, {"bmm", "batch", "[2, 2, 3]", "[3, 3, 4]"});
  expect_error([&] { bmm(zeros({2, 2, 3}), zeros({2, 4, 4})); }, {"bmm", "inner", "[2, 2, 3]", "[2, 4, 4]"});
  expect_error([&] { linear(zeros({2, 3}), zeros({4, 5})); }, {"linear", "[2, 3]", "[4, 5]"});
  expect_error([&] { linear(zeros({2, 3}), zeros({3})); }, {"linear", "2-D weight", "[3]"});
  expect_error([&] { linear(zeros({2, 3}), zeros({4, 3}), zeros({5})); }, {"linear", "bias", "[5]"});
  expect_error([&] { matmul(zeros({2, 3}), zeros({3, 4}, {.dtype = kBFloat16})); },
               {"matmul", "float32", "bfloat16", "[2, 3]", "[3, 4]"});
  expect_error([&] { linear(zeros({2, 3}), zeros({4, 3}), zeros({4}, {.dtype = kFloat16})); },
               {"linear", "float32", "float16"});
  expect_error([&] { matmul(zeros({2, 3}, {.dtype = kInt64}), zeros({3, 4}, {.dtype = kInt64})); },
               {"matmul", "floating-point", "int64"});
}

TEST(PrimitiveCache, SameShapeTwiceCreatesOnePrimitive) {
  // A shape no other test uses, so the first call misses.
  Tensor a = uniform_input({37, 41}, kFloat32, 44), b = uniform_input({41, 43}, kFloat32, 45);
  const auto before = kernels::primitive_cache_stats();
  matmul(a, b);
  const auto middle = kernels::primitive_cache_stats();
  EXPECT_EQ(middle.created - before.created, 1);
  matmul(a, b);
  matmul(uniform_input({37, 41}, kFloat32, 46), uniform_input({41, 43}, kFloat32, 47));  // other data, same key
  const auto after = kernels::primitive_cache_stats();
  EXPECT_EQ(after.created, middle.created);
  EXPECT_GE(after.hits - middle.hits, 2);
  // A transposed operand is a different layout: one more primitive, then hits again.
  matmul(a, uniform_input({43, 41}, kFloat32, 48).t());
  matmul(a, uniform_input({43, 41}, kFloat32, 49).t());
  EXPECT_EQ(kernels::primitive_cache_stats().created, after.created + 1);
}

}  // namespace
}  // namespace mixtrain::testing
