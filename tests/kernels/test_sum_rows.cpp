// kernels::sum_rows (the bias gradient of linear): every layout and dtype equals a plain
// row-order fp32 (fp64 for fp64) accumulation bit for bit, whatever the thread count, and an fp32
// input of widened 16-bit values rounded into a 16-bit output equals the 16-bit input's sum.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/linalg.h"
#include "mixtrain/ops/elementwise.h"
#include "ops/test_linalg_util.h"
#include "ops/test_nn_helpers.h"

namespace mixtrain::testing {
namespace {

// out[j] = sum over i in row order of x[i, j], accumulated in fp32 (fp64 for fp64), rounded to `out_dtype`.
Tensor reference_sum_rows(const Tensor& x, DType out_dtype) {
  const int64_t rows = x.size(0), cols = x.size(1);
  Tensor x64 = x.to(kFloat64).contiguous().to(Device{});  // exact for every input dtype, on the host
  const double* p = x64.data_ptr<double>();
  Tensor out = Tensor::empty({cols}, kFloat64);
  for (int64_t j = 0; j < cols; ++j) {
    if (x.dtype() == kFloat64) {
      double acc = 0;
      for (int64_t i = 0; i < rows; ++i) acc += p[i * cols + j];
      out.data_ptr<double>()[j] = acc;
    } else {
      float acc = 0;
      for (int64_t i = 0; i < rows; ++i) acc += static_cast<float>(p[i * cols + j]);
      out.data_ptr<double>()[j] = acc;
    }
  }
  // fp32 -> 16-bit is the one rounding; fp64 -> fp32 of an fp32 value is exact.
  return out_dtype == kFloat64 ? out : out.to(kFloat32).to(out_dtype);
}

Tensor run_sum_rows(const Tensor& x, DType out_dtype, int threads) {
  return with_threads(threads, [&] {
    Tensor out = Tensor::empty({x.size(1)}, out_dtype);
    kernels::sum_rows(x, out);
    return out;
  });
}

TEST(SumRows, EqualsRowOrderAccumulationInEveryLayoutAndDtype) {
  // 600 columns: several 256-column blocks and a partial one; 70 rows.
  for (DType dt : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    for (bool transposed : {false, true}) {
      SCOPED_TRACE(::testing::Message() << name(dt) << (transposed ? ", transposed" : ", row-major"));
      Tensor x = transposed ? uniform_input({600, 70}, dt, 3).t() : uniform_input({70, 600}, dt, 3);
      const Tensor expected = reference_sum_rows(x, dt);
      for (int threads : {1, 2, 3}) EXPECT_TRUE(bitwise_equal(run_sum_rows(x, dt, threads), expected)) << threads;
    }
  }
}

TEST(SumRows, ColumnSplitsAndRowBlocksKeepTheRowOrder) {
  // Enough rows that threads split 250 columns (not a multiple of the 16-column split unit) between
  // them, a row count that leaves a partial row block, and rows strided past their width.
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    SCOPED_TRACE(name(dt));
    Tensor x = (uniform_input({2101, 260}, kFloat32, 9) * 300.0).to(dt).narrow(1, 3, 250);
    const Tensor expected = reference_sum_rows(x, dt);
    for (int threads : {1, 2, 3}) EXPECT_TRUE(bitwise_equal(run_sum_rows(x, dt, threads), expected)) << threads;
  }
}

TEST(SumRows, WidenedInputRoundedIntoSixteenBitsEqualsTheSixteenBitSum) {
  for (DType dt : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(name(dt));
    // Large values too, so that the fp32 sum is not exact and the order of additions matters.
    Tensor x16 = (uniform_input({300, 520}, kFloat32, 8) * 300.0).to(dt);
    Tensor from32 = run_sum_rows(x16.to(kFloat32), dt, 2);
    EXPECT_TRUE(bitwise_equal(from32, run_sum_rows(x16, dt, 2)));
    EXPECT_TRUE(bitwise_equal(from32, reference_sum_rows(x16, dt)));
  }
}

TEST(SumRows, SingleRowAndSingleColumn) {
  Tensor row = uniform_input({1, 300}, kFloat16, 4);
  EXPECT_TRUE(bitwise_equal(run_sum_rows(row, kFloat16, 2), row.reshape({300})));
  Tensor col = uniform_input({50, 1}, kFloat32, 5);
  EXPECT_TRUE(bitwise_equal(run_sum_rows(col, kFloat32, 2), reference_sum_rows(col, kFloat32)));
}

}  // namespace
}  // namespace mixtrain::testing
