// kernels::sum_rows (the bias gradient of linear): every layout and dtype equals the blocked
// row-order fp32 (fp64 for fp64) accumulation of kernels/linalg.h bit for bit, whatever the thread
// count, and an fp32 input of widened 16-bit values rounded into a 16-bit output equals the 16-bit
// input's sum.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels/linalg.h"
#include "mixtrain/ops/elementwise.h"
#include "ops/test_linalg_util.h"
#include "ops/test_nn_helpers.h"

namespace mixtrain::testing {
namespace {

// out[j] = the sum of x[i, j] over i in `block`-row blocks: each block summed in row order from
// zero, the block sums added in block order from zero; accumulated in Acc, returned as double.
template <typename Acc>
double blocked_column_sum(const double* p, int64_t rows, int64_t cols, int64_t j, int64_t block) {
  Acc total = 0;
  for (int64_t b = 0; b < rows; b += block) {
    Acc part = 0;
    for (int64_t i = b; i < std::min(rows, b + block); ++i) part += static_cast<Acc>(p[i * cols + j]);
    total += part;
  }
  return total;
}

// The blocked row order of kernels/linalg.h (blocks of kernels::sum_rows_block(rows) rows; one block
// and so the plain row order for `block` >= rows), in fp32 (fp64 for fp64), rounded to `out_dtype`.
Tensor reference_sum_rows(const Tensor& x, DType out_dtype, int64_t block = -1) {
  const int64_t rows = x.size(0), cols = x.size(1);
  if (block < 0) block = kernels::sum_rows_block(rows);
  Tensor x64 = x.to(kFloat64).contiguous().to(Device{});  // exact for every input dtype, on the host
  const double* p = x64.data_ptr<double>();
  Tensor out = Tensor::empty({cols}, kFloat64);
  for (int64_t j = 0; j < cols; ++j) {
    out.data_ptr<double>()[j] = x.dtype() == kFloat64 ? blocked_column_sum<double>(p, rows, cols, j, block)
                                                      : blocked_column_sum<float>(p, rows, cols, j, block);
  }
  // fp32 -> 16-bit is the one rounding; fp64 -> fp32 of an fp32 value is exact.
  return out_dtype == kFloat64 ? out : out.to(kFloat32).to(out_dtype);
}

Tensor run_sum_rows(const Tensor& x, DType out_dtype, int threads) {
  return with_threads(threads, [&] {
    Tensor out = Tensor::empty({x.size(1)}, out_dtype, x.device());
    kernels::sum_rows(x, out);
    return out;
  });
}

TEST(SumRows, EqualsBlockedRowOrderInEveryLayoutAndDtype) {
  // 600 columns: several 256-column blocks and a partial one; 70 rows: two row blocks.
  for (DType dt : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    for (bool transposed : {false, true}) {
      SCOPED_TRACE(::testing::Message() << to_string(dt) << (transposed ? ", transposed" : ", row-major"));
      Tensor x = transposed ? uniform_input({600, 70}, dt, 3).t() : uniform_input({70, 600}, dt, 3);
      const Tensor expected = reference_sum_rows(x, dt);
      for (int threads : {1, 2, 3}) EXPECT_TRUE(bitwise_equal(run_sum_rows(x, dt, threads), expected)) << threads;
    }
  }
}

TEST(SumRows, BlocksDependOnTheRowCountAlone) {
  // 2101 rows: 32 blocks of 66, the last one partial, split unevenly between 2 and 3 threads; 250
  // columns (not a multiple of a vector) of rows strided past their width. Large values, so that the
  // fp32 sums are not exact: the plain row order gives other fp32 bits, which the test also checks.
  EXPECT_EQ(kernels::sum_rows_block(64), 64);
  EXPECT_EQ(kernels::sum_rows_block(2048), 64);
  EXPECT_EQ(kernels::sum_rows_block(2101), 66);
  for (DType dt : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    SCOPED_TRACE(to_string(dt));
    Tensor x = (uniform_input({2101, 260}, kFloat32, 9) * 300.0).to(dt).narrow(1, 3, 250);
    const Tensor expected = reference_sum_rows(x, dt);
    if (dt == kFloat32)  // (a 16-bit output's rounding, or fp64's precision, can hide the order)
      EXPECT_FALSE(bitwise_equal(expected, reference_sum_rows(x, dt, x.size(0)))) << "the orders should differ";
    for (int threads : {1, 2, 3}) EXPECT_TRUE(bitwise_equal(run_sum_rows(x, dt, threads), expected)) << threads;
    for (int threads : {1, 2})  // the transposed layout (column stride > 1) sums in the same order
      EXPECT_TRUE(bitwise_equal(run_sum_rows(x.t().contiguous().t(), dt, threads), expected)) << threads;
  }
}

TEST(SumRows, UpToSixtyFourRowsIsThePlainRowOrder) {
  for (int64_t rows : {1, 63, 64}) {
    Tensor x = uniform_input({rows, 40}, kFloat32, 11) * 300.0;
    EXPECT_TRUE(bitwise_equal(run_sum_rows(x, kFloat32, 2), reference_sum_rows(x, kFloat32, rows))) << rows;
  }
}

TEST(SumRows, NoRowsGiveZeros) {
  Tensor x = Tensor::empty({0, 33}, kFloat32);
  EXPECT_TRUE(bitwise_equal(run_sum_rows(x, kFloat32, 2), zeros({33})));
}

TEST(SumRows, WidenedInputRoundedIntoSixteenBitsEqualsTheSixteenBitSum) {
  for (DType dt : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(to_string(dt));
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
