// conv2d on CUDA (src/backends/cuda/kernels/conv_cudnn.cpp: cuDNN) against the CPU's (oneDNN; fp64: the
// reference loops) through the op front-end, nn::functional::conv2d: forward with and without a bias,
// the input, weight and bias gradients from one shared output gradient, in fp32, bf16, fp16 and fp64,
// for strides, padding, dilation, groups (depthwise too) and the CLI's CNN layers at batch 1 and 16;
// the same bits on a second run (deterministic algorithms); TF32 only when allowed; operands that
// start mid-vector; empty batches; and the CLI's CNN trained 3 AdamW steps on both devices. Values
// agree within the kCudaConv* tolerances of support/tolerances.h, whose absolute part is a fraction of
// the compared tensor's largest magnitude (expect_close_to_scale). Every test skips where no GPU is
// present, or where the build has no cuDNN (conv2d then has no CUDA kernel).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_test_helpers.h"
#include "ops/conv_cases.h"
#include "kernels/conv.h"
#include "kernels/dispatch.h"
#include "mixtrain/cuda.h"
#include "mixtrain/mixtrain.h"
#include "support/tolerances.h"

// The CLI's model table, where the test binary links the CLI (MIXTRAIN_BUILD_CLI).
#if __has_include("models.h")
#include "models.h"
#define MT_TEST_HAVE_CLI_MODELS 1
#endif

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;

// Skips where no GPU can be used or where conv2d has no CUDA kernel (a build without cuDNN).
#define MT_REQUIRE_CUDNN()                                             \
  MT_REQUIRE_GPU();                                                    \
  mt::kernels::register_builtin_kernels();                             \
  if (!mt::kernels::conv2d_forward_table.has(mt::kCUDA, mt::kFloat32)) \
  GTEST_SKIP() << "conv2d has no CUDA kernel in this build (cuDNN not found: MIXTRAIN_CUDNN, CUDNN_ROOT)"

namespace {

using mt::testing::Tolerance;
using mt::testing::gpu::bytes_of;
using mt::testing::gpu::kGpu;
using mt::testing::gpu::kHost;

const mt::DType kDTypes[] = {mt::kFloat32, mt::kBFloat16, mt::kFloat16, mt::kFloat64};

// |gpu - cpu| <= rtol * |cpu| + atol * max|cpu| element by element, every GPU value finite.
void expect_close_to_scale(const mt::Tensor& gpu, const mt::Tensor& cpu, Tolerance tol, const std::string& what) {
  ASSERT_TRUE(gpu.defined() && cpu.defined()) << what;
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  EXPECT_EQ(gpu.dtype(), cpu.dtype()) << what;
  EXPECT_EQ(gpu.device(), kGpu) << what;
  const std::vector<double> g = gpu.to(kHost).to_vector<double>(), c = cpu.to(kHost).to_vector<double>();
  double scale = 0;
  for (double v : c) scale = std::max(scale, std::fabs(v));
  int64_t bad = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const bool ok = std::isfinite(g[i]) && std::fabs(g[i] - c[i]) <= tol.rtol * std::fabs(c[i]) + tol.atol * scale;
    if (!ok && bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " gpu " << g[i] << " cpu " << c[i] << " (largest |cpu| " << scale
                    << ")";
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << c.size() << " elements differ";
}

// The tolerance of a conv2d result in dtype dt; biased_forward: a 16-bit forward with a bias (two
// roundings on the GPU, see kCudaConvBias*).
Tolerance conv_tol(mt::DType dt, bool biased_forward = false) {
  switch (dt) {
    case mt::kBFloat16: return biased_forward ? mt::testing::kCudaConvBiasBf16 : mt::testing::kCudaConvBf16;
    case mt::kFloat16: return biased_forward ? mt::testing::kCudaConvBiasFp16 : mt::testing::kCudaConvFp16;
    case mt::kFloat64: return mt::testing::kCudaConvFp64;
    default: return mt::testing::kCudaConvFp32;
  }
}

using Case = mt::testing::ConvCase;
const std::vector<Case>& geometry_cases() { return mt::testing::conv_cases(); }

// The CLI's CNN (tools/mixtrain/models.h): Conv2d(1, 32, 3, pad 1) on 28x28 and Conv2d(32, 64, 3,
// pad 1) on 14x14, at batch `n`.
std::vector<Case> cnn_cases(int64_t n) {
  const std::string b = " batch " + std::to_string(n);
  return {{"cnn conv1" + b, {n, 1, 28, 28}, {32, 1, 3, 3}, {.padding_h = 1, .padding_w = 1}},
          {"cnn conv2" + b, {n, 32, 14, 14}, {64, 32, 3, 3}, {.padding_h = 1, .padding_w = 1}}};
}

mt::Shape out_shape(const Case& c) {
  const F::Conv2dOptions& o = c.o;
  return {c.x[0], c.w[0], (c.x[2] + 2 * o.padding_h - o.dilation_h * (c.w[2] - 1) - 1) / o.stride_h + 1,
          (c.x[3] + 2 * o.padding_w - o.dilation_w * (c.w[3] - 1) - 1) / o.stride_w + 1};
}

struct Inputs {
  mt::Tensor x, w, b;  // b undefined without a bias
};

// Unit-normal x and gy, w scaled by 1/sqrt(fan_in) (outputs of unit size), a bias of a quarter of
// that: max|bias| stays under half of max|y| (kCudaConvBias*). All in dt, on the host.
Inputs make_inputs(const Case& c, mt::DType dt, bool bias, uint64_t seed) {
  mt::Generator g(seed);
  const double fan_in = static_cast<double>(c.w[1] * c.w[2] * c.w[3]);
  Inputs in;
  in.x = mt::randn(c.x, {}, &g).to(dt);
  in.w = (mt::randn(c.w, {}, &g) * (1.0 / std::sqrt(fan_in))).to(dt);
  if (bias) in.b = (mt::randn({c.w[0]}, {}, &g) * 0.25).to(dt);
  return in;
}

struct Results {
  mt::Tensor y, gx, gw, gb;
};

// conv2d forward on `device` from leaf copies of the inputs, then backward from gy.
Results run_on(mt::Device device, const Case& c, const Inputs& in, const mt::Tensor& gy) {
  mt::Tensor x = in.x.to(device).detach().requires_grad_(true);
  mt::Tensor w = in.w.to(device).detach().requires_grad_(true);
  mt::Tensor b = in.b.defined() ? in.b.to(device).detach().requires_grad_(true) : mt::Tensor();
  Results r;
  r.y = F::conv2d(x, w, b, c.o);
  EXPECT_EQ(r.y.shape(), gy.shape());
  r.y.backward(gy.to(device));
  r.gx = x.grad();
  r.gw = w.grad();
  if (b.defined()) r.gb = b.grad();
  return r;
}

// Forward and backward of case c in dt on both devices, compared.
void check_case(const Case& c, mt::DType dt, bool bias, uint64_t seed) {
  SCOPED_TRACE(c.name + ", " + std::string(mt::to_string(dt)) + (bias ? ", with bias" : ", no bias"));
  const Inputs in = make_inputs(c, dt, bias, seed);
  mt::Generator g(seed + 1000);
  const mt::Tensor gy = mt::randn(out_shape(c), {}, &g).to(dt);
  const Results cpu = run_on(kHost, c, in, gy), gpu = run_on(kGpu, c, in, gy);
  if (bias) {
    // kCudaConvBias*'s assumption.
    double max_y = 0, max_b = 0;
    for (double v : cpu.y.to_vector<double>()) max_y = std::max(max_y, std::fabs(v));
    for (double v : in.b.to_vector<double>()) max_b = std::max(max_b, std::fabs(v));
    ASSERT_LE(max_b, max_y / 2) << "the bias tolerance assumes max|bias| <= max|y| / 2";
  }
  expect_close_to_scale(gpu.y, cpu.y, conv_tol(dt, bias), "output");
  expect_close_to_scale(gpu.gx, cpu.gx, conv_tol(dt), "input gradient");
  expect_close_to_scale(gpu.gw, cpu.gw, conv_tol(dt), "weight gradient");
  if (bias) expect_close_to_scale(gpu.gb, cpu.gb, conv_tol(dt), "bias gradient");
}

TEST(CudaConv, GeometriesMatchTheCpuInEveryDtype) {
  MT_REQUIRE_CUDNN();
  uint64_t seed = 100;
  for (const Case& c : geometry_cases())
    for (mt::DType dt : kDTypes)
      for (bool bias : {false, true}) check_case(c, dt, bias, seed++);
}

TEST(CudaConv, CnnLayersMatchTheCpuAtBatch1And16) {
  MT_REQUIRE_CUDNN();
  uint64_t seed = 200;
  for (int64_t n : {int64_t{1}, int64_t{16}})
    for (const Case& c : cnn_cases(n))
      for (mt::DType dt : kDTypes)
        for (bool bias : {false, true}) check_case(c, dt, bias, seed++);
}

// Gradients of some inputs only, and an unbatched [C, H, W] input through a transposed (non-contiguous)
// view: the front-end hands the kernels contiguous operands and undefined gradients stay unwritten.
TEST(CudaConv, PartialGradientsAndUnbatchedInputsMatchTheCpu) {
  MT_REQUIRE_CUDNN();
  const Case c = geometry_cases()[3];  // groups 2
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16}) {
    SCOPED_TRACE(mt::to_string(dt));
    const Inputs in = make_inputs(c, dt, true, 300);
    for (int which = 0; which < 3; ++which) {
      auto run = [&](mt::Device d) {
        mt::Tensor x = in.x.to(d).detach().requires_grad_(which == 0);
        mt::Tensor w = in.w.to(d).detach().requires_grad_(which == 1);
        mt::Tensor b = in.b.to(d).detach().requires_grad_(which == 2);
        mt::Tensor y = F::conv2d(x, w, b, c.o);
        y.backward(mt::ones(y.shape(), {.dtype = dt, .device = d}));
        EXPECT_EQ(x.grad().defined(), which == 0);
        EXPECT_EQ(w.grad().defined(), which == 1);
        EXPECT_EQ(b.grad().defined(), which == 2);
        return which == 0 ? x.grad() : which == 1 ? w.grad() : b.grad();
      };
      expect_close_to_scale(run(kGpu), run(kHost), conv_tol(dt), "gradient of input " + std::to_string(which));
    }
    // [C, H, W] from a transposed copy: x3 is a non-contiguous view of the same values.
    const mt::Tensor x3 = in.x.select(0, 1).transpose(1, 2).contiguous().transpose(1, 2);
    ASSERT_FALSE(x3.is_contiguous());
    const mt::Tensor cpu = F::conv2d(x3, in.w, in.b, c.o);
    const mt::Tensor gpu = F::conv2d(x3.to(kGpu), in.w.to(kGpu), in.b.to(kGpu), c.o);
    EXPECT_EQ(gpu.dim(), 3);
    expect_close_to_scale(gpu, cpu, conv_tol(dt, true), "unbatched, non-contiguous input");
  }
}

// Deterministic algorithms only: a second forward and backward gives the same bits.
TEST(CudaConv, SecondRunGivesTheSameBits) {
  MT_REQUIRE_CUDNN();
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16, mt::kFloat16}) {
    for (const Case& c : cnn_cases(16)) {
      SCOPED_TRACE(c.name + ", " + std::string(mt::to_string(dt)));
      const Inputs in = make_inputs(c, dt, true, 400);
      mt::Generator g(401);
      const mt::Tensor gy = mt::randn(out_shape(c), {}, &g).to(dt);
      const Results a = run_on(kGpu, c, in, gy), b = run_on(kGpu, c, in, gy);
      EXPECT_EQ(bytes_of(a.y), bytes_of(b.y)) << "output";
      EXPECT_EQ(bytes_of(a.gx), bytes_of(b.gx)) << "input gradient";
      EXPECT_EQ(bytes_of(a.gw), bytes_of(b.gw)) << "weight gradient";
      EXPECT_EQ(bytes_of(a.gb), bytes_of(b.gb)) << "bias gradient";
    }
  }
}

// TF32 only when allowed: with set_allow_tf32(true) fp32 stays within TF32's error, and back off, the
// algorithms cached for full fp32 are used again (the choice is cached per TF32 setting).
TEST(CudaConv, Tf32OnlyWhenAllowed) {
  MT_REQUIRE_CUDNN();
  const bool previous = mt::cuda::allow_tf32();
  const Case c = cnn_cases(16)[1];
  for (bool allow : {true, false}) {
    SCOPED_TRACE(allow ? "TF32 allowed" : "TF32 not allowed");
    mt::cuda::set_allow_tf32(allow);
    const Inputs in = make_inputs(c, mt::kFloat32, true, 500);
    mt::Generator g(501);
    const mt::Tensor gy = mt::randn(out_shape(c), {}, &g);
    const Results cpu = run_on(kHost, c, in, gy), gpu = run_on(kGpu, c, in, gy);
    const Tolerance tol = allow ? mt::testing::kCudaConvTf32 : mt::testing::kCudaConvFp32;
    expect_close_to_scale(gpu.y, cpu.y, tol, "output");
    expect_close_to_scale(gpu.gx, cpu.gx, tol, "input gradient");
    expect_close_to_scale(gpu.gw, cpu.gw, tol, "weight gradient");
  }
  mt::cuda::set_allow_tf32(previous);
}

// Operands that start mid-vector (a batch slice whose image size is odd, in fp16) are staged through
// aligned buffers, inputs and outputs alike; the kernel is called directly to hand it such an output.
TEST(CudaConv, OperandsThatStartMidVectorMatchTheCpu) {
  MT_REQUIRE_CUDNN();
  const mt::DType dt = mt::kFloat16;
  mt::Generator g(600);
  // 3 * 5 * 5 = 75 values per image: image 1 starts 150 bytes in.
  const mt::Tensor base = mt::randn({3, 3, 5, 5}, {}, &g).to(dt);
  const mt::Tensor w = (mt::randn({5, 3, 3, 3}, {}, &g) * 0.2).to(dt), b = (mt::randn({5}, {}, &g) * 0.1).to(dt);
  const F::Conv2dOptions o{.padding_h = 1, .padding_w = 1};
  const mt::Tensor x_cpu = base.narrow(0, 1, 2), x_gpu = base.to(kGpu).narrow(0, 1, 2);
  ASSERT_TRUE(x_gpu.is_contiguous());
  ASSERT_NE(reinterpret_cast<uintptr_t>(x_gpu.raw_data()) % 16, 0u);
  const mt::Tensor cpu = F::conv2d(x_cpu, w, b, o);
  expect_close_to_scale(F::conv2d(x_gpu, w.to(kGpu), b.to(kGpu), o), cpu, conv_tol(dt, true), "input mid-vector");
  // Output [2, 5, 5, 5]: 125 values per image; a slice starting at image 1 of a [3, ...] buffer.
  const mt::Tensor y_buffer = mt::zeros({3, 5, 5, 5}, {.dtype = dt, .device = kGpu});
  const mt::Tensor y = y_buffer.narrow(0, 1, 2);
  ASSERT_NE(reinterpret_cast<uintptr_t>(y.raw_data()) % 16, 0u);
  const mt::Tensor xc = x_gpu.contiguous(), wc = w.to(kGpu), bc = b.to(kGpu);
  (*mt::kernels::conv2d_forward_kernel()(kGpu, dt))(xc, wc, bc, y, {1, 1, 1, 1, 1, 1, 1});
  expect_close_to_scale(y, cpu, conv_tol(dt, true), "output mid-vector");
  EXPECT_EQ(y_buffer.narrow(0, 0, 1).to(kHost).to_vector<float>(), std::vector<float>(125, 0.0f))
      << "wrote outside the slice";
}

// An empty batch: an empty output, zero weight and bias gradients (empty sums), as on the CPU.
TEST(CudaConv, EmptyBatchGivesZeroGradients) {
  MT_REQUIRE_CUDNN();
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16}) {
    SCOPED_TRACE(mt::to_string(dt));
    mt::Tensor x = mt::zeros({0, 4, 6, 6}, {.dtype = dt, .device = kGpu}).requires_grad_(true);
    mt::Tensor w = mt::ones({8, 4, 3, 3}, {.dtype = dt, .device = kGpu}).requires_grad_(true);
    mt::Tensor b = mt::ones({8}, {.dtype = dt, .device = kGpu}).requires_grad_(true);
    mt::Tensor y = F::conv2d(x, w, b, {.padding_h = 1, .padding_w = 1});
    EXPECT_EQ(y.shape(), mt::Shape({0, 8, 6, 6}));
    y.backward(mt::zeros(y.shape(), {.dtype = dt, .device = kGpu}));
    EXPECT_EQ(w.grad().to(kHost).to_vector<float>(), std::vector<float>(8 * 4 * 9, 0.0f));
    EXPECT_EQ(b.grad().to(kHost).to_vector<float>(), std::vector<float>(8, 0.0f));
    EXPECT_EQ(x.grad().shape(), x.shape());
  }
}

// The CLI's CNN trained 3 AdamW steps in fp32 on the GPU and on the CPU from the same initial weights
// and batch: the losses agree within kCudaCnnTrainingLoss, the weights within AdamW's steps.
TEST(CudaConv, CnnModelTrainsThreeAdamWStepsLikeTheCpu) {
  MT_REQUIRE_CUDNN();
#ifndef MT_TEST_HAVE_CLI_MODELS
  GTEST_SKIP() << "the CLI's model table (tools/mixtrain/models.h) is not in this build (MIXTRAIN_BUILD_CLI=OFF)";
#else
  mt::Generator g(700);
  const mt::Tensor x = mt::randn({16, 1, 28, 28}, {}, &g);
  const mt::Tensor target = mt::randint(0, 10, {16}, {.dtype = mt::kInt64}, &g);
  struct Trained {
    std::vector<double> losses;
    std::vector<std::vector<double>> params;
  };
  auto train = [&](mt::Device device) {
    const mt::Device previous = mt::default_device();
    mt::set_default_device(kHost);
    std::shared_ptr<mt::nn::Module> model = mt::cli::make_model("cnn", /*seed=*/3);  // built on the CPU
    mt::set_default_device(previous);
    model->to(device);
    mt::optim::AdamW opt(model->parameters(), {.lr = 1e-3});
    Trained t;
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      mt::Tensor loss = F::cross_entropy((*model)(x.to(device)), target.to(device));
      t.losses.push_back(loss.to(kHost).item<float>());
      loss.backward();
      opt.step();
    }
    for (const mt::Tensor& p : model->parameters()) {
      EXPECT_EQ(p.device(), device);
      t.params.push_back(p.to(kHost).to_vector<double>());
    }
    return t;
  };
  const Trained cpu = train(kHost), gpu = train(kGpu);
  ASSERT_EQ(cpu.losses.size(), 3u);
  for (int step = 0; step < 3; ++step) {
    EXPECT_TRUE(std::isfinite(cpu.losses[step]));
    EXPECT_NEAR(
        gpu.losses[step], cpu.losses[step],
        mt::testing::kCudaCnnTrainingLoss.rtol * std::fabs(cpu.losses[step]) + mt::testing::kCudaCnnTrainingLoss.atol)
        << "loss of step " << step;
  }
  // AdamW moves a weight by at most about 3.2 lr a step (the bias-corrected m / sqrt(v) bound at betas
  // 0.9 / 0.999, tests/cli/test_placement.cpp), so even a weight whose tiny gradient has the other sign
  // on one device stays within 3 steps x 2 x 3.2 lr.
  ASSERT_EQ(cpu.params.size(), gpu.params.size());
  for (size_t i = 0; i < cpu.params.size(); ++i) {
    ASSERT_EQ(cpu.params[i].size(), gpu.params[i].size());
    double worst = 0;
    for (size_t j = 0; j < cpu.params[i].size(); ++j)
      worst = std::max(worst, std::fabs(cpu.params[i][j] - gpu.params[i][j]));
    EXPECT_LE(worst, 3 * 2 * 3.2e-3) << "parameter " << i;
  }
#endif
}

}  // namespace
