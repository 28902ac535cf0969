// The CUDA kernels that tests/cuda/test_cuda.cpp and test_cuda_nn.cpp do not reach, against the
// CPU: the bias-gradient row sums and broadcast sums (the CPU's blocked row order: the same bits),
// gather/scatter by index (embedding, index_select), the index check with its ignored count, the
// binary ops' backward pieces (div, pow), selection and comparison, SGD, and the vectorised and
// strided paths of the elementwise maps. And one test that runs everywhere: every kernel table the
// CUDA backend registers is named here or in the other CUDA test files, so a new table cannot come
// without its CUDA-vs-CPU test.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/backend.h"
#include "cuda/cuda_test_helpers.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise.h"
#include "kernels/linalg.h"
#include "kernels/shape_ops.h"
#include "mixtrain/mixtrain.h"
#include "support/tolerances.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;

namespace {

using mt::testing::gpu::bytes_of;
using mt::testing::gpu::expect_close;
using mt::testing::gpu::kGpu;
using mt::testing::gpu::kHost;

const mt::DType kFloating[] = {mt::kFloat32, mt::kFloat64, mt::kFloat16, mt::kBFloat16};

// ---- sums over rows (the bias gradient of linear) and over broadcast dims
TEST(CudaSums, SumRowsGivesTheCpusBitsInEveryLayoutAndDtype) {
  MT_REQUIRE_GPU();
  mt::Generator g(11);
  // 16384 rows: 32 row blocks of 512 (GPT-small's B * T); 70: two blocks of 64 and 6; 1: one row.
  for (int64_t rows : {int64_t{1}, int64_t{70}, int64_t{16384}}) {
    for (mt::DType dt : kFloating) {
      for (bool transposed : {false, true}) {
        SCOPED_TRACE(::testing::Message() << rows << " rows, " << mt::to_string(dt) << (transposed ? ", transposed" : ""));
        const mt::Tensor base = mt::randn(transposed ? mt::Shape{300, rows} : mt::Shape{rows, 300}, {}, &g).to(dt);
        const mt::Tensor x = transposed ? base.t() : base;
        auto run = [&](mt::Device d) {
          mt::Tensor out = mt::Tensor::empty({300}, dt, d);
          mt::kernels::sum_rows(x.to(d), out);
          return bytes_of(out);
        };
        EXPECT_EQ(run(kGpu), run(kHost));
      }
    }
    // An fp32 input summed into a 16-bit output (linear's fp32 route rounds the fp32 sum once).
    const mt::Tensor x = mt::randn({rows, 77}, {}, &g);
    for (mt::DType out_dt : {mt::kBFloat16, mt::kFloat16}) {
      auto run = [&](mt::Device d) {
        mt::Tensor out = mt::Tensor::empty({77}, out_dt, d);
        mt::kernels::sum_rows(x.to(d), out);
        return bytes_of(out);
      };
      EXPECT_EQ(run(kGpu), run(kHost)) << mt::to_string(out_dt);
    }
  }
  // No rows: zeros.
  mt::Tensor out = mt::full({5}, 3.0, {.device = kGpu});
  mt::kernels::sum_rows(mt::zeros({0, 5}, {.device = kGpu}), out);
  EXPECT_EQ(out.to_vector<float>(), std::vector<float>(5, 0.0f));
}

TEST(CudaSums, BroadcastGradientsSumToTheCpusValues) {
  MT_REQUIRE_GPU();
  mt::Generator g(12);
  for (mt::DType dt : kFloating) {
    SCOPED_TRACE(mt::to_string(dt));
    // a [4, 1, 6, 5] @ b [3, 5, 7]: a's size-1 dim and b's missing dim are broadcast; the gradients
    // sum over them (sum_to_size).
    const mt::Tensor a = mt::randn({4, 1, 6, 5}, {}, &g).to(dt), b = mt::randn({3, 5, 7}, {}, &g).to(dt);
    auto grads = [&](mt::Device d) {
      mt::Tensor ad = a.to(d).requires_grad_(), bd = b.to(d).requires_grad_();
      mt::sum(mt::matmul(ad, bd).to(mt::kFloat32)).backward();
      return std::make_pair(ad.grad(), bd.grad());
    };
    const auto [ga, gb] = grads(kGpu);
    const auto [ca, cb] = grads(kHost);
    expect_close(ga, ca, mt::testing::cuda_gemm(dt), "grad a");
    expect_close(gb, cb, mt::testing::cuda_gemm(dt), "grad b");
  }
}

// ---- cuBLASLt with operands that start mid-vector: the algorithm is chosen for the actual alignment
// (a kernel picked for 16-byte operands could fault on these and poison the context for every later
// call), and is cached under it, so an aligned product of the same shape afterwards still works.
TEST(CudaMatmul, MisalignedViewsPickAnAlgorithmThatTakesThem) {
  MT_REQUIRE_GPU();
  mt::Generator g(20);
  for (mt::DType dt : {mt::kBFloat16, mt::kFloat16, mt::kFloat32}) {
    SCOPED_TRACE(mt::to_string(dt));
    const mt::Tensor a_big = mt::randn({64, 97}, {}, &g).to(dt), b_big = mt::randn({97, 65}, {}, &g).to(dt);
    const mt::Tensor a_gpu = a_big.to(kGpu), b_gpu = b_big.to(kGpu);
    for (int64_t offset : {int64_t{0}, int64_t{1}, int64_t{3}}) {
      // Columns offset..offset+95 of a, rows offset..offset+95 of b, as views of the device tensors:
      // the first element 2-12 bytes past a 16-byte boundary, the leading dimensions odd (97, 65).
      const mt::Tensor a = a_big.narrow(1, offset, 96), b = b_big.narrow(0, offset, 96).narrow(1, 0, 64);
      expect_close(mt::matmul(a_gpu.narrow(1, offset, 96), b_gpu.narrow(0, offset, 96).narrow(1, 0, 64)),
                   mt::matmul(a, b), mt::testing::cuda_gemm(dt), "misaligned");
    }
    const mt::Tensor a = a_big.narrow(1, 0, 96).contiguous(), b = b_big.narrow(0, 0, 96).narrow(1, 0, 64).contiguous();
    expect_close(mt::matmul(a.to(kGpu), b.to(kGpu)), mt::matmul(a, b), mt::testing::cuda_gemm(dt), "aligned after");
  }
}

// ---- the fused head's products (kernels/linalg.h): 16-bit A and B with an fp32 output straight from
// cuBLASLt's accumulators, and out += a @ b (beta 1), with a transposed (strided) a as the head passes
// dlogits^T, against the CPU's kernels on the same operands. fp32 GEMM accuracy: a result rounded to
// 16 bits would miss it.
TEST(CudaMatmul, WideningAndAccumulatingProductsMatchTheCpu) {
  MT_REQUIRE_GPU();
  namespace k = mt::kernels;
  mt::Generator g(21);
  const mt::Tensor c0 = mt::randn({23, 16}, {}, &g);
  for (mt::DType dt : {mt::kBFloat16, mt::kFloat16}) {
    SCOPED_TRACE(mt::to_string(dt));
    const mt::Tensor a = mt::randn({37, 23}, {}, &g).to(dt), b = mt::randn({37, 16}, {}, &g).to(dt);
    const mt::Tensor bias = mt::randn({16}, {}, &g).to(dt);
    mt::Tensor want = mt::empty({23, 16}), got = mt::empty({23, 16}, {.device = kGpu});
    k::matmul_widening_table(kHost, dt)(a.t(), b, bias, want, false);
    k::matmul_widening_table(kGpu, dt)(a.to(kGpu).t(), b.to(kGpu), bias.to(kGpu), got, false);
    expect_close(got, want, mt::testing::cuda_gemm(mt::kFloat32), "widening with bias");
    mt::Tensor sum_want = c0.clone(), sum_got = c0.to(kGpu);
    k::matmul_widening_table(kHost, dt)(a.t(), b, mt::Tensor(), sum_want, true);
    k::matmul_widening_table(kGpu, dt)(a.to(kGpu).t(), b.to(kGpu), mt::Tensor(), sum_got, true);
    expect_close(sum_got, sum_want, mt::testing::cuda_gemm(mt::kFloat32), "widening, accumulated");
    // An empty inner dim: the bias alone.
    mt::Tensor only_bias = mt::empty({23, 16}, {.device = kGpu});
    k::matmul_widening_table(kGpu, dt)(mt::zeros({23, 0}, {.dtype = dt, .device = kGpu}),
                                       mt::zeros({0, 16}, {.dtype = dt, .device = kGpu}), bias.to(kGpu), only_bias,
                                       false);
    expect_close(only_bias, mt::zeros({23, 16}) + bias.to(mt::kFloat32), mt::testing::cuda_gemm(mt::kFloat32),
                 "bias alone");
  }
  for (mt::DType dt : {mt::kFloat32, mt::kFloat64}) {
    SCOPED_TRACE(mt::to_string(dt));
    const mt::Tensor a = mt::randn({37, 23}, {}, &g).to(dt), b = mt::randn({37, 16}, {}, &g).to(dt);
    mt::Tensor want = c0.to(dt), got = c0.to(dt).to(kGpu);
    k::matmul_accumulate_table(kHost, dt)(a.t(), b, want);
    k::matmul_accumulate_table(kGpu, dt)(a.to(kGpu).t(), b.to(kGpu), got);
    expect_close(got, want, mt::testing::cuda_gemm(dt), "accumulated");
  }
}

// ---- gather and scatter by index
TEST(CudaIndex, EmbeddingAndIndexSelectForwardAndBackwardMatchTheCpu) {
  MT_REQUIRE_GPU();
  mt::Generator g(13);
  for (mt::DType dt : kFloating) {
    SCOPED_TRACE(mt::to_string(dt));
    const mt::Tensor weight = mt::randn({50, 24}, {}, &g).to(dt);
    // Repeated indices: their gradients are summed (in index order on both devices).
    const mt::Tensor idx = mt::randint(0, 50, {6, 33}, {.dtype = mt::kInt64}, &g);
    const mt::Tensor gy = mt::randn({6, 33, 24}, {}, &g).to(dt);
    auto run = [&](mt::Device d) {
      mt::Tensor w = weight.to(d).requires_grad_();
      mt::Tensor y = F::embedding(idx.to(d), w);
      y.backward(gy.to(d));
      return std::make_pair(y, w.grad());
    };
    const auto [y, gw] = run(kGpu);
    const auto [cy, cgw] = run(kHost);
    EXPECT_EQ(bytes_of(y), bytes_of(cy)) << "a gather copies bytes";
    expect_close(gw, cgw, mt::testing::cuda_vs_cpu_rounded(dt, mt::testing::kCudaSumOrder), "embedding grad");
    // index_select along a middle dim, int32 indices.
    const mt::Tensor x = mt::randn({3, 10, 4}, {}, &g).to(dt);
    const mt::Tensor i32 = mt::from_vector(std::vector<int32_t>{9, 0, 0, 4, 9}, {5}, {.dtype = mt::kInt32});
    EXPECT_EQ(bytes_of(mt::index_select(x.to(kGpu), 1, i32.to(kGpu))), bytes_of(mt::index_select(x, 1, i32)));
  }
}

TEST(CudaIndex, OutOfRangeIndicesAreErrorsAndIgnoredTargetsAreCounted) {
  MT_REQUIRE_GPU();
  const mt::Tensor w = mt::randn({10, 4}, {.device = kGpu});
  const mt::Tensor bad = mt::from_vector(std::vector<int64_t>{1, 2, 10, -1}, {4}, {.dtype = mt::kInt64, .device = kGpu});
  EXPECT_THROW(F::embedding(bad, w), mt::Error);
  const mt::Tensor ids = mt::from_vector(std::vector<int64_t>{3, -100, 7, -100, -100}, {5}, {.dtype = mt::kInt64});
  const mt::kernels::IndexCheck gpu = mt::kernels::check_index(ids.to(kGpu), 10, -100);
  const mt::kernels::IndexCheck cpu = mt::kernels::check_index(ids, 10, -100);
  EXPECT_FALSE(gpu.bad.has_value());
  EXPECT_EQ(gpu.ignored, 3);
  EXPECT_EQ(gpu.ignored, cpu.ignored);
  const mt::kernels::IndexCheck first_bad = mt::kernels::check_index(bad, 10);
  ASSERT_TRUE(first_bad.bad.has_value());
  EXPECT_EQ(first_bad.bad->position, 2) << "the first bad position, whatever thread found one first";
  EXPECT_EQ(first_bad.bad->value, 10);
  // Cross-entropy's mean divides by the targets not ignored, counted by the same check.
  mt::Generator g(14);
  const mt::Tensor logits = mt::randn({5, 10}, {}, &g);
  EXPECT_NEAR(F::cross_entropy(logits.to(kGpu), ids.to(kGpu)).item<double>(), F::cross_entropy(logits, ids).item<double>(),
              1e-5);
}

// ---- elementwise pieces not covered elsewhere
TEST(CudaElementwise, DivAndPowBackwardMatchTheCpu) {
  MT_REQUIRE_GPU();
  mt::Generator g(15);
  for (mt::DType dt : kFloating) {
    SCOPED_TRACE(mt::to_string(dt));
    const mt::Tensor a = (mt::rand({257}, {}, &g) + 0.5).to(dt), b = (mt::rand({257}, {}, &g) + 0.5).to(dt);
    auto run = [&](mt::Device d) {
      mt::Tensor x = a.to(d).requires_grad_(), y = b.to(d).requires_grad_();
      mt::sum(mt::add(mt::div(x, y), mt::pow(x, y)).to(mt::kFloat32)).backward();
      return std::make_pair(x.grad(), y.grad());
    };
    const auto [gx, gy] = run(kGpu);
    const auto [cx, cy] = run(kHost);
    expect_close(gx, cx, mt::testing::cuda_vs_cpu_rounded(dt), "d/da");
    expect_close(gy, cy, mt::testing::cuda_vs_cpu_rounded(dt), "d/db");
  }
}

TEST(CudaElementwise, SelectionAndComparisonGiveTheCpusBits) {
  MT_REQUIRE_GPU();
  mt::Generator g(16);
  for (mt::DType dt : {mt::kFloat32, mt::kFloat64, mt::kFloat16, mt::kBFloat16, mt::kInt32, mt::kInt64, mt::kUInt8}) {
    SCOPED_TRACE(mt::to_string(dt));
    const mt::Tensor a = mt::randint(0, 5, {7, 9}, {.dtype = dt}, &g), b = mt::randint(0, 5, {7, 9}, {.dtype = dt}, &g);
    const mt::Tensor cond = mt::gt(mt::randn({7, 9}, {}, &g), 0.0);
    const mt::Tensor ga = a.to(kGpu), gb = b.to(kGpu), gc = cond.to(kGpu);
    EXPECT_EQ(bytes_of(mt::where(gc, ga, gb)), bytes_of(mt::where(cond, a, b)));
    EXPECT_EQ(bytes_of(mt::masked_fill(ga, gc, 3.0)), bytes_of(mt::masked_fill(a, cond, 3.0)));
    EXPECT_EQ(bytes_of(mt::eq(ga, gb)), bytes_of(mt::eq(a, b)));
    EXPECT_EQ(bytes_of(mt::gt(ga, 2.0)), bytes_of(mt::gt(a, 2.0)));
    EXPECT_EQ(bytes_of(mt::lt(ga.t(), 2.5)), bytes_of(mt::lt(a.t(), 2.5)));
  }
}

// Contiguous aligned operands take the 16-byte path, an offset view and a broadcast one the strided
// path: the same values either way, and the CPU's for exact ops.
TEST(CudaElementwise, VectorisedAndStridedPathsAgree) {
  MT_REQUIRE_GPU();
  mt::Generator g(17);
  for (mt::DType dt : kFloating) {
    SCOPED_TRACE(mt::to_string(dt));
    // 1027 elements: full 16-byte vectors and a tail in every dtype.
    const mt::Tensor a = mt::randn({1028}, {}, &g).to(dt), b = mt::randn({1028}, {}, &g).to(dt);
    const mt::Tensor ga = a.to(kGpu), gb = b.to(kGpu);
    const mt::Tensor aligned = mt::add(ga.narrow(0, 0, 1027), gb.narrow(0, 0, 1027));
    const mt::Tensor offset = mt::add(ga.narrow(0, 1, 1027), gb.narrow(0, 1, 1027));  // 2-8 bytes off
    EXPECT_EQ(bytes_of(aligned), bytes_of(mt::add(a.narrow(0, 0, 1027), b.narrow(0, 0, 1027))));
    EXPECT_EQ(bytes_of(offset), bytes_of(mt::add(a.narrow(0, 1, 1027), b.narrow(0, 1, 1027))));
    const mt::Tensor row = mt::randn({1, 16}, {}, &g).to(dt), col = mt::randn({12, 16}, {}, &g).to(dt);
    EXPECT_EQ(bytes_of(mt::mul(row.to(kGpu), col.to(kGpu))), bytes_of(mt::mul(row, col)));
    // The scalar ops (add_scalar, mul_scalar, square): exact in fp32, one rounding: the CPU's bits.
    EXPECT_EQ(bytes_of(mt::add(mt::mul(ga, 2.5), 1.5)), bytes_of(mt::add(mt::mul(a, 2.5), 1.5)));
    EXPECT_EQ(bytes_of(mt::pow(ga.narrow(0, 1, 1027), 2.0)), bytes_of(mt::pow(a.narrow(0, 1, 1027), 2.0)));
    expect_close(mt::exp(ga.narrow(0, 0, 1027)), mt::exp(a.narrow(0, 0, 1027)), mt::testing::cuda_vs_cpu_rounded(dt),
                 "exp, vectorised");
    expect_close(mt::exp(ga.narrow(0, 1, 1027)), mt::exp(a.narrow(0, 1, 1027)), mt::testing::cuda_vs_cpu_rounded(dt),
                 "exp, strided");
  }
}

// gelu_linear's backward: gelu(x) and its input gradient from one erf per element, the values of the
// separate forward and backward kernels on the same device, and the CPU's to rounding.
TEST(CudaElementwise, GeluForwardAndBackwardInOnePassMatchTheSeparateKernels) {
  MT_REQUIRE_GPU();
  mt::Generator g(19);
  for (mt::DType dt : kFloating) {
    SCOPED_TRACE(mt::to_string(dt));
    const mt::Tensor x = (mt::randn({3, 333}, {}, &g) * 3.0).to(dt), gy = mt::randn({3, 333}, {}, &g).to(dt);
    const mt::Tensor gx_dev = x.to(kGpu), ggy = gy.to(kGpu);
    mt::Tensor y = mt::Tensor::empty(x.shape(), dt, kGpu), gin = ggy.clone();
    mt::kernels::gelu_forward_backward_kernel()(kGpu, dt)(y, gin, gin, gx_dev);  // grad_in aliases grad_out
    mt::Tensor y2 = mt::Tensor::empty(x.shape(), dt, kGpu), gin2 = mt::Tensor::empty(x.shape(), dt, kGpu);
    mt::kernels::unary_kernel(mt::kernels::UnaryOp::kGelu)(kGpu, dt)(y2, gx_dev, {});
    mt::kernels::unary_backward_kernel(mt::kernels::UnaryOp::kGelu)(kGpu, dt)(gin2, ggy, gx_dev, {});
    EXPECT_EQ(bytes_of(y), bytes_of(y2));
    EXPECT_EQ(bytes_of(gin), bytes_of(gin2));
    expect_close(y, mt::gelu(x), mt::testing::cuda_vs_cpu_rounded(dt), "gelu");
  }
}

// ---- SGD: the CPU's IEEE operations in the CPU's order (optim.cu is built without FMA contraction)
TEST(CudaOptim, SgdStepGivesTheCpusBits) {
  MT_REQUIRE_GPU();
  mt::Generator g(18);
  for (mt::DType pd : {mt::kFloat32, mt::kBFloat16, mt::kFloat16}) {
    for (bool nesterov : {false, true}) {
      SCOPED_TRACE(std::string(mt::to_string(pd)) + (nesterov ? " nesterov" : ""));
      const mt::Tensor p0 = mt::randn({2000}, {}, &g).to(pd);
      std::vector<mt::Tensor> grads;
      for (int s = 0; s < 3; ++s) grads.push_back(mt::randn({2000}, {}, &g).to(pd));
      auto run = [&](mt::Device d) {
        mt::Tensor p = p0.to(d).clone().requires_grad_(true);
        mt::optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = nesterov});
        for (const mt::Tensor& gr : grads) {
          p.set_grad(gr.to(d));
          opt.step();
        }
        return bytes_of(p);
      };
      EXPECT_EQ(run(kGpu), run(kHost));
    }
  }
}

// ---- coverage (runs without a GPU: the registry is filled in every CUDA build)
// The ops of the tables the CUDA backend registers, and the CUDA tests that compare them with the CPU.
// A table missing here fails the test: add its CUDA-vs-CPU test and its line.
const std::set<std::string>& covered_ops() {
  static const std::set<std::string> ops = {
      "copy", "fill", "random fill",                                         // CudaCopy
      "add", "mul", "div", "pow", "neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu",
      "gelu_tanh", "silu", "clamp", "add_scalar", "mul_scalar", "square", "pow_scalar",  // CudaElementwise
      "where", "masked_fill", "eq", "gt", "lt",                               // CudaElementwise.Selection...
      "sum", "amax", "argmax",                                                // CudaReduce
      "sum_rows", "sum_to_size",                                              // CudaSums
      "matmul", "matmul (fp32 route)", "matmul route",                        // CudaMatmul, CudaSums
      "matmul (16-bit in, fp32 out)", "matmul accumulate",                    // CudaMatmul.Widening...
      "softmax", "softmax_backward", "layer_norm", "layer_norm_backward", "dropout", "dropout_backward",
      "max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward",  // CudaNn
      "scaled_dot_product_attention", "scaled_dot_product_attention_backward",  // CudaAttention
      "cross_entropy", "cross_entropy_backward", "pointwise_loss", "pointwise_loss_backward",  // CudaLoss
      "batch_norm", "batch_norm backward", "batch_norm running-stats update",  // CudaBatchNorm
      "multi-tensor scale and check", "multi-tensor norm", "adam step", "unpack master", "pack master",
      "grad scaler unscale", "grad scaler update",                            // CudaOptim
      "sgd step",                                                             // CudaOptim.Sgd...
      "index check", "index_select", "index_select_backward",                 // CudaIndex
      "conv2d", "conv2d backward",                                            // CudaConv
  };
  return ops;
}

TEST(CudaCoverage, EveryTableTheCudaBackendRegistersHasACudaVsCpuTest) {
  if (mt::device_count(mt::kCUDA) == 0 && !mt::has_backend(mt::kCUDA)) GTEST_SKIP() << "no CUDA backend in this build";
  mt::kernels::register_builtin_kernels();
  struct Found {
    std::set<std::string> registered;
  } found;
  mt::kernels::for_each_table(
      [](mt::kernels::DispatchTableBase& t, void* c) {
        for (int d = 0; d < mt::kNumDTypes; ++d)
          if (t.has(mt::kCUDA, static_cast<mt::DType>(d))) static_cast<Found*>(c)->registered.insert(t.op());
      },
      &found);
  ASSERT_GT(found.registered.size(), 40u) << "the CUDA backend registered almost nothing";
  for (const std::string& op : found.registered)
    EXPECT_TRUE(covered_ops().count(op)) << "the CUDA kernel of '" << op << "' has no CUDA-vs-CPU test listed";
}

}  // namespace
