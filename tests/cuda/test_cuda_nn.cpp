// The CUDA nn, loss and batch_norm kernels (src/backends/cuda/kernels/nn_*.cu, loss.cu) against
// the CPU's through the public functional API: each op forward and backward on the same inputs and
// the same output gradient on both devices. Dropout and pooling give the CPU's bits (the same
// Philox mask; maxima and the CPU's order of additions); the rest agree within the tolerances of
// support/tolerances.h (another order of fp32 sums, CUDA's exp / log, 16-bit rounding flips). Every
// test skips, with the driver's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cuda/cuda_test_helpers.h"
#include "mixtrain/cuda.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/nn/batch_norm.h"
#include "support/expect_error.h"
#include "support/tolerances.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;

namespace {

using mt::testing::Tolerance;
using mt::testing::gpu::bytes_of;
using mt::testing::gpu::expect_close;
using mt::testing::gpu::kGpu;
using mt::testing::gpu::kHost;

const mt::DType kFloatDTypes[] = {mt::kFloat32, mt::kBFloat16, mt::kFloat16, mt::kFloat64};
const F::Reduction kReductions[] = {F::Reduction::kNone, F::Reduction::kMean, F::Reduction::kSum};

std::string trace(mt::DType dt, const std::string& what) { return std::string(mt::to_string(dt)) + " " + what; }

using Fn = std::function<mt::Tensor(const std::vector<mt::Tensor>&)>;

// f on leaf copies of `inputs` on the CPU and on the GPU, then backward from one shared output
// gradient (standard normal, in the output's dtype): the outputs and the inputs' gradients.
struct TwoRuns {
  mt::Tensor cpu, gpu;
  std::vector<mt::Tensor> cpu_grads, gpu_grads;
};

TwoRuns run_on_both(const Fn& f, const std::vector<mt::Tensor>& inputs, uint64_t seed) {
  std::vector<mt::Tensor> c, g;
  for (const mt::Tensor& x : inputs) {
    c.push_back(x.clone().requires_grad_(true));
    g.push_back(x.to(kGpu).requires_grad_(true));
  }
  TwoRuns r{f(c), f(g), {}, {}};
  EXPECT_EQ(r.gpu.device(), kGpu);
  EXPECT_EQ(r.gpu.dtype(), r.cpu.dtype());
  mt::Generator gen(seed);
  const mt::Tensor gy = mt::randn(r.cpu.shape(), {}, &gen).to(r.cpu.dtype());
  r.cpu.backward(gy);
  r.gpu.backward(gy.to(kGpu));
  for (size_t i = 0; i < inputs.size(); ++i) {
    r.cpu_grads.push_back(c[i].grad());
    r.gpu_grads.push_back(g[i].grad());
  }
  return r;
}

// Each input's gradient within `tol` (a gradient has its input's dtype).
void expect_grads_close(const TwoRuns& r, const std::vector<Tolerance>& tols, const char* what) {
  for (size_t i = 0; i < r.cpu_grads.size(); ++i) {
    SCOPED_TRACE(std::string(what) + ": gradient of input " + std::to_string(i));
    ASSERT_TRUE(r.cpu_grads[i].defined() && r.gpu_grads[i].defined());
    EXPECT_EQ(r.gpu_grads[i].dtype(), r.cpu_grads[i].dtype());
    expect_close(r.gpu_grads[i], r.cpu_grads[i], tols[i < tols.size() ? i : tols.size() - 1], what);
  }
}

// A softmax-family backward reads the saved output, which in 16 bits may differ between the devices
// by one 16-bit ulp (a forward rounding flip): the 16-bit softmax-backward budget of tolerances.h.
Tolerance softmax_bwd_tol(mt::DType dt) {
  switch (dt) {
    case mt::kBFloat16: return mt::testing::kSoftmaxBwdBf16;
    case mt::kFloat16: return mt::testing::kSoftmaxBwdFp16;
    default: return mt::testing::kCudaSumOrder;
  }
}

// ---- softmax / log_softmax
TEST(CudaNn, SoftmaxAndLogSoftmaxMatchTheCpu) {
  MT_REQUIRE_GPU();
  mt::Generator g(21);
  struct Case {
    mt::Shape shape;
    int64_t dim;
  };
  // Rows of 1000 (256 threads), 5000 (1024 threads) and 6 (one warp); a softmax over a middle dim
  // (one thread per column).
  const Case cases[] = {{{7, 1000}, 1}, {{2, 5000}, -1}, {{4, 33, 6}, 2}, {{3, 50, 17}, 1}, {{5, 4}, 0}};
  for (mt::DType dt : kFloatDTypes) {
    for (const Case& c : cases) {
      const mt::Tensor x = (mt::randn(c.shape, {}, &g) * 3.0).to(dt);
      for (bool log : {false, true}) {
        SCOPED_TRACE(trace(dt, (log ? "log_softmax " : "softmax ") + std::to_string(c.shape.numel())));
        const int64_t dim = c.dim;
        const TwoRuns r = run_on_both(
            [&](const std::vector<mt::Tensor>& in) { return log ? F::log_softmax(in[0], dim) : F::softmax(in[0], dim); },
            {x}, 22);
        expect_close(r.gpu, r.cpu, mt::testing::cuda_vs_cpu_rounded(dt), "forward");
        expect_grads_close(r, {softmax_bwd_tol(dt)}, "backward");
      }
    }
  }
}

TEST(CudaNn, SoftmaxWithAnOutputDtypeMatchesTheCpu) {
  MT_REQUIRE_GPU();
  mt::Generator g(23);
  for (mt::DType dt : {mt::kBFloat16, mt::kFloat16}) {
    const mt::Tensor x = (mt::randn({6, 300}, {}, &g) * 3.0).to(dt);
    for (bool log : {false, true}) {
      SCOPED_TRACE(trace(dt, log ? "log_softmax -> fp32" : "softmax -> fp32"));
      const TwoRuns r = run_on_both(
          [&](const std::vector<mt::Tensor>& in) {
            return log ? F::log_softmax(in[0], -1, mt::kFloat32) : F::softmax(in[0], -1, mt::kFloat32);
          },
          {x}, 24);
      EXPECT_EQ(r.gpu.dtype(), mt::kFloat32);
      expect_close(r.gpu, r.cpu, mt::testing::kCudaTranscendental, "forward");
      // fp32 saved outputs on both devices: only the 16-bit rounding of dx can flip.
      expect_grads_close(r, {mt::testing::cuda_vs_cpu_rounded(dt, mt::testing::kCudaSumOrder)}, "backward");
    }
  }
}

TEST(CudaNn, SoftmaxPropagatesNanAndInfinity) {
  MT_REQUIRE_GPU();
  // A NaN row, an all -inf row (0/0: NaN), a row with one +inf (NaN: inf - inf) and a plain row.
  const float inf = INFINITY;
  const mt::Tensor x = mt::from_vector<float>({1, NAN, 2, 3, -inf, -inf, -inf, -inf, 0, inf, 1, 2, 0, 1, 2, 3}, {4, 4});
  for (bool log : {false, true}) {
    SCOPED_TRACE(log ? "log_softmax" : "softmax");
    const mt::Tensor cpu = log ? F::log_softmax(x, 1) : F::softmax(x, 1);
    const mt::Tensor gpu = log ? F::log_softmax(x.to(kGpu), 1) : F::softmax(x.to(kGpu), 1);
    expect_close(gpu, cpu, mt::testing::kCudaTranscendental, "non-finite rows");
    const mt::Tensor col_cpu = log ? F::log_softmax(x.t(), 0) : F::softmax(x.t(), 0);
    const mt::Tensor col_gpu = log ? F::log_softmax(x.to(kGpu).t(), 0) : F::softmax(x.to(kGpu).t(), 0);
    expect_close(col_gpu, col_cpu, mt::testing::kCudaTranscendental, "non-finite columns");
  }
}

// ---- layer_norm
TEST(CudaNn, LayerNormMatchesTheCpu) {
  MT_REQUIRE_GPU();
  mt::Generator g(25);
  struct Case {
    mt::Shape shape, normalized;
  };
  // 1000 rows: 63 row blocks of 16 in the weight/bias gradient; 5000 columns: 1024 threads a row.
  const Case cases[] = {{{1000, 64}, {64}}, {{3, 5000}, {5000}}, {{2, 5, 3, 7}, {3, 7}}};
  for (mt::DType dt : kFloatDTypes) {
    for (mt::DType pdt : {dt, mt::kFloat32}) {
      if (pdt == mt::kFloat32 && dt == mt::kFloat32) continue;
      for (const Case& c : cases) {
        const mt::Shape norm = c.normalized;
        const mt::Tensor x = (mt::randn(c.shape, {}, &g) * 2.0 + 0.5).to(dt);
        const mt::Tensor w = (mt::rand(norm, {}, &g) + 0.5).to(pdt), b = mt::randn(norm, {}, &g).to(pdt);
        SCOPED_TRACE(trace(dt, "params " + std::string(mt::to_string(pdt)) + ", " + std::to_string(c.shape.numel())));
        const auto tol = mt::testing::cuda_vs_cpu_rounded(dt, mt::testing::kCudaSumOrder);
        const auto ptol = mt::testing::cuda_vs_cpu_rounded(pdt, mt::testing::kCudaSumOrder);
        const TwoRuns affine = run_on_both(
            [&](const std::vector<mt::Tensor>& in) { return F::layer_norm(in[0], norm, in[1], in[2]); }, {x, w, b}, 26);
        expect_close(affine.gpu, affine.cpu, tol, "forward");
        expect_grads_close(affine, {tol, ptol, ptol}, "backward");
        const TwoRuns plain =
            run_on_both([&](const std::vector<mt::Tensor>& in) { return F::layer_norm(in[0], norm); }, {x}, 27);
        expect_close(plain.gpu, plain.cpu, tol, "forward, no weight or bias");
        expect_grads_close(plain, {tol}, "backward, no weight or bias");
        const TwoRuns bias_only = run_on_both(
            [&](const std::vector<mt::Tensor>& in) { return F::layer_norm(in[0], norm, mt::Tensor(), in[1]); }, {x, b},
            28);
        expect_close(bias_only.gpu, bias_only.cpu, tol, "forward, bias only");
        expect_grads_close(bias_only, {tol, ptol}, "backward, bias only");
      }
    }
  }
}

TEST(CudaNn, LayerNormWeightGradientWithoutInputGradient) {
  MT_REQUIRE_GPU();
  mt::Generator g(29);
  const mt::Tensor x = mt::randn({300, 40}, {}, &g);
  const mt::Tensor w0 = mt::rand({40}, {}, &g) + 0.5, gy = mt::randn({300, 40}, {}, &g);
  auto grad_w = [&](mt::Device d) {
    mt::Tensor w = w0.to(d).clone().requires_grad_(true);
    F::layer_norm(x.to(d), {40}, w).backward(gy.to(d));
    return w.grad();
  };
  expect_close(grad_w(kGpu), grad_w(kHost), mt::testing::kCudaSumOrder, "weight gradient only");
}

// ---- dropout: the same Philox mask, the same bits.
TEST(CudaNn, DropoutDrawsTheCpusMaskBitForBit) {
  MT_REQUIRE_GPU();
  mt::Generator g(31);
  for (mt::DType dt : kFloatDTypes) {
    for (const mt::Shape& shape : {mt::Shape{10007}, mt::Shape{3, 5, 7}, mt::Shape{1}}) {
      const mt::Tensor x = mt::randn(shape, {}, &g).to(dt);
      for (double p : {0.1, 0.5, 0.9}) {
        SCOPED_TRACE(trace(dt, "p " + std::to_string(p) + ", " + std::to_string(shape.numel()) + " elements"));
        mt::Generator a(42), b(42);
        mt::Tensor xc = x.clone().requires_grad_(true), xg = x.to(kGpu).requires_grad_(true);
        const mt::Tensor yc = F::dropout(xc, p, true, &a), yg = F::dropout(xg, p, true, &b);
        EXPECT_EQ(bytes_of(yg), bytes_of(yc)) << "forward";
        EXPECT_EQ(b.offset(), a.offset());
        const mt::Tensor gy = mt::randn(shape, {}, &g).to(dt);
        yc.backward(gy);
        yg.backward(gy.to(kGpu));
        EXPECT_EQ(bytes_of(xg.grad()), bytes_of(xc.grad())) << "backward";
      }
    }
  }
  // A transposed (non-contiguous) input, and a second call that continues the generator's stream.
  const mt::Tensor m = mt::randn({40, 30}, {}, &g);
  mt::Generator a(7), b(7);
  for (int call = 0; call < 2; ++call)
    EXPECT_EQ(bytes_of(F::dropout(m.to(kGpu).t(), 0.3, true, &b)), bytes_of(F::dropout(m.t(), 0.3, true, &a))) << call;
}

// ---- pooling: maxima are exact and backward adds in the CPU's order: the same bits.
struct PoolCase {
  const char* name;
  F::Pool2dOptions opts;
};
const PoolCase kPoolCases[] = {
    {"2x2 stride 2", {.kernel_h = 2, .kernel_w = 2}},
    {"3x3 stride 2 pad 1", {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .padding_h = 1, .padding_w = 1}},
    {"3x2 stride 1 (overlapping)", {.kernel_h = 3, .kernel_w = 2, .stride_h = 1, .stride_w = 1, .padding_h = 1}},
    {"17x17 stride 3 pad 8 (int32 argmax)",
     {.kernel_h = 17, .kernel_w = 17, .stride_h = 3, .stride_w = 3, .padding_h = 8, .padding_w = 8}},
    {"1x4 stride (1, 3)", {.kernel_h = 1, .kernel_w = 4, .stride_h = 1, .stride_w = 3}},
};

TEST(CudaNn, MaxPoolGivesTheCpusBits) {
  MT_REQUIRE_GPU();
  mt::Generator g(33);
  for (mt::DType dt : kFloatDTypes) {
    // Small integers: many ties, so the first maximum in row-major order must be picked.
    const mt::Tensor ties = mt::randint(-4, 5, {2, 3, 19, 21}, {.dtype = mt::kInt64}, &g).to(dt);
    const mt::Tensor spread = mt::randn({2, 3, 20, 22}, {}, &g).to(dt);
    for (const mt::Tensor& x : {ties, spread}) {
      for (const PoolCase& c : kPoolCases) {
        SCOPED_TRACE(trace(dt, c.name));
        const F::Pool2dOptions o = c.opts;
        const TwoRuns r = run_on_both([&](const std::vector<mt::Tensor>& in) { return F::max_pool2d(in[0], o); }, {x}, 34);
        EXPECT_EQ(bytes_of(r.gpu), bytes_of(r.cpu)) << "forward";
        EXPECT_EQ(bytes_of(r.gpu_grads[0]), bytes_of(r.cpu_grads[0])) << "backward";
      }
    }
  }
}

TEST(CudaNn, MaxPoolPropagatesNan) {
  MT_REQUIRE_GPU();
  mt::Generator g(35);
  mt::Tensor x = mt::randn({1, 2, 8, 8}, {}, &g);
  x = mt::where(mt::gt(x, 1.5), mt::full({1}, NAN), x);
  for (const PoolCase& c : kPoolCases) {
    SCOPED_TRACE(c.name);
    const F::Pool2dOptions o = c.opts;
    const TwoRuns r = run_on_both([&](const std::vector<mt::Tensor>& in) { return F::max_pool2d(in[0], o); }, {x}, 36);
    expect_close(r.gpu, r.cpu, {0.0, 0.0}, "forward");
    expect_close(r.gpu_grads[0], r.cpu_grads[0], {0.0, 0.0}, "backward");
  }
}

TEST(CudaNn, AvgPoolGivesTheCpusBits) {
  MT_REQUIRE_GPU();
  mt::Generator g(37);
  for (mt::DType dt : kFloatDTypes) {
    const mt::Tensor x = mt::randn({2, 3, 19, 21}, {}, &g).to(dt);
    for (const PoolCase& c : kPoolCases) {
      SCOPED_TRACE(trace(dt, c.name));
      const F::Pool2dOptions o = c.opts;
      const TwoRuns r = run_on_both([&](const std::vector<mt::Tensor>& in) { return F::avg_pool2d(in[0], o); }, {x}, 38);
      // The window sums and the gradient sums run in the CPU's order, with the same divisions.
      EXPECT_EQ(bytes_of(r.gpu), bytes_of(r.cpu)) << "forward";
      EXPECT_EQ(bytes_of(r.gpu_grads[0]), bytes_of(r.cpu_grads[0])) << "backward";
    }
  }
}

// ---- cross_entropy / nll_loss
// Targets in [0, classes) with every fifth row ignored (ignore_index -100).
mt::Tensor class_targets(int64_t rows, int64_t classes, mt::Generator& g) {
  std::vector<int64_t> t = mt::randint(0, classes, {rows}, {.dtype = mt::kInt64}, &g).to_vector<int64_t>();
  for (size_t i = 0; i < t.size(); i += 5) t[i] = -100;
  return mt::from_vector<int64_t>(t);
}

TEST(CudaLoss, CrossEntropyMatchesTheCpu) {
  MT_REQUIRE_GPU();
  mt::Generator g(41);
  struct Case {
    int64_t rows, classes;
  };
  const Case cases[] = {{64, 10}, {9, 5000}, {300, 1}};
  for (mt::DType dt : kFloatDTypes) {
    for (const Case& c : cases) {
      const mt::Tensor x = (mt::randn({c.rows, c.classes}, {}, &g) * 3.0).to(dt);
      const mt::Tensor t64 = class_targets(c.rows, c.classes, g);
      for (mt::DType tdt : {mt::kInt64, mt::kInt32}) {
        const mt::Tensor target = t64.to(tdt);
        for (F::Reduction red : kReductions) {
          for (double smoothing : {0.0, 0.1}) {
            SCOPED_TRACE(trace(dt, std::to_string(c.rows) + "x" + std::to_string(c.classes) + " reduction " +
                                       std::to_string(static_cast<int>(red)) + " smoothing " + std::to_string(smoothing) +
                                       " target " + std::string(mt::to_string(tdt))));
            const TwoRuns r = run_on_both(
                [&](const std::vector<mt::Tensor>& in) {
                  return F::cross_entropy(in[0], target.to(in[0].device()), red, -100, smoothing);
                },
                {x}, 42);
            const auto tol = mt::testing::cuda_vs_cpu_rounded(dt, mt::testing::kCudaSumOrder);
            expect_close(r.gpu, r.cpu, tol, "forward");
            expect_grads_close(r, {tol}, "backward");
          }
        }
      }
    }
  }
}

TEST(CudaLoss, CrossEntropyOverSpatialDimsAndAllIgnoredRows) {
  MT_REQUIRE_GPU();
  mt::Generator g(43);
  // [N, C, d]: the class dim moved last on the device.
  const mt::Tensor x = mt::randn({4, 10, 7}, {}, &g);
  const mt::Tensor target = mt::randint(0, 10, {4, 7}, {.dtype = mt::kInt64}, &g);
  const TwoRuns r = run_on_both(
      [&](const std::vector<mt::Tensor>& in) { return F::cross_entropy(in[0], target.to(in[0].device())); }, {x}, 44);
  expect_close(r.gpu, r.cpu, mt::testing::kCudaSumOrder, "spatial forward");
  expect_grads_close(r, {mt::testing::kCudaSumOrder}, "spatial backward");
  // Every row ignored: the mean is 0/0 = NaN and the sum 0 on both devices.
  const mt::Tensor none = mt::full({6}, -100, {.dtype = mt::kInt64});
  const mt::Tensor logits = mt::randn({6, 3}, {}, &g);
  for (F::Reduction red : kReductions) {
    expect_close(F::cross_entropy(logits.to(kGpu), none.to(kGpu), red), F::cross_entropy(logits, none, red),
                 {0.0, 0.0}, "all rows ignored");
  }
}

TEST(CudaLoss, NllLossMatchesTheCpu) {
  MT_REQUIRE_GPU();
  mt::Generator g(45);
  for (mt::DType dt : kFloatDTypes) {
    const mt::Tensor lp = F::log_softmax(mt::randn({50, 12}, {}, &g), 1).to(dt);
    const mt::Tensor target = class_targets(50, 12, g);
    for (F::Reduction red : kReductions) {
      SCOPED_TRACE(trace(dt, "reduction " + std::to_string(static_cast<int>(red))));
      const TwoRuns r = run_on_both(
          [&](const std::vector<mt::Tensor>& in) { return F::nll_loss(in[0], target.to(in[0].device()), red); }, {lp},
          46);
      const auto tol = mt::testing::cuda_vs_cpu_rounded(dt, mt::testing::kCudaSumOrder);
      expect_close(r.gpu, r.cpu, tol, "forward");
      expect_grads_close(r, {tol}, "backward");
    }
  }
}

// ---- pointwise losses
TEST(CudaLoss, PointwiseLossesMatchTheCpu) {
  MT_REQUIRE_GPU();
  mt::Generator g(47);
  for (mt::DType dt : kFloatDTypes) {
    const mt::Tensor x = (mt::randn({37, 101}, {}, &g) * 2.0).to(dt);
    const mt::Tensor probs = (mt::rand({37, 101}, {}, &g) * 0.98 + 0.01).to(dt);
    const mt::Tensor target = mt::rand({37, 101}, {}, &g).to(dt);
    struct Case {
      const char* name;
      mt::Tensor (*f)(const mt::Tensor&, const mt::Tensor&, F::Reduction);
      bool on_probs;
    };
    const Case cases[] = {
        {"mse_loss", [](const mt::Tensor& a, const mt::Tensor& b, F::Reduction r) { return F::mse_loss(a, b, r); }, false},
        {"binary_cross_entropy",
         [](const mt::Tensor& a, const mt::Tensor& b, F::Reduction r) { return F::binary_cross_entropy(a, b, r); }, true},
        {"binary_cross_entropy_with_logits",
         [](const mt::Tensor& a, const mt::Tensor& b, F::Reduction r) { return F::binary_cross_entropy_with_logits(a, b, r); },
         false},
    };
    for (const Case& c : cases) {
      for (F::Reduction red : kReductions) {
        SCOPED_TRACE(trace(dt, std::string(c.name) + " reduction " + std::to_string(static_cast<int>(red))));
        const auto f = c.f;
        const TwoRuns r = run_on_both([&](const std::vector<mt::Tensor>& in) { return f(in[0], in[1], red); },
                                      {c.on_probs ? probs : x, target}, 48);
        const auto tol = mt::testing::cuda_vs_cpu_rounded(dt, mt::testing::kCudaSumOrder);
        expect_close(r.gpu, r.cpu, tol, "forward");
        expect_grads_close(r, {tol, tol}, "backward (input, target)");
      }
    }
  }
}

TEST(CudaLoss, BinaryCrossEntropyNamesTheFirstProbabilityOutOfRange) {
  MT_REQUIRE_GPU();
  const mt::Tensor p = mt::from_vector<float>({0.5f, 0.2f, 1.0f, 1.5f, 0.0f, -0.1f, NAN});
  const mt::Tensor t = mt::full({7}, 0.5);
  EXPECT_MT_ERROR(F::binary_cross_entropy(p, t), "element 3");
  EXPECT_MT_ERROR(F::binary_cross_entropy(p.to(kGpu), t.to(kGpu)), "binary_cross_entropy", "element 3");
  // Probabilities 0 and 1 are valid: the logs are clamped at -100.
  const mt::Tensor edge = mt::from_vector<float>({0.0f, 1.0f, 0.3f}), te = mt::from_vector<float>({0.0f, 1.0f, 0.7f});
  expect_close(F::binary_cross_entropy(edge.to(kGpu), te.to(kGpu)), F::binary_cross_entropy(edge, te),
               mt::testing::kCudaTranscendental, "probabilities 0 and 1");
}

// ---- batch_norm
TEST(CudaBatchNorm, TrainingAndEvalMatchTheCpu) {
  MT_REQUIRE_GPU();
  mt::Generator g(51);
  for (mt::DType dt : kFloatDTypes) {
    for (mt::DType pdt : {dt, mt::kFloat32}) {
      if (pdt == mt::kFloat32 && dt == mt::kFloat32) continue;
      for (const mt::Shape& shape : {mt::Shape{16, 5}, mt::Shape{4, 3, 6, 7}, mt::Shape{2, 4, 300}}) {
        const int64_t C = shape[1];
        const mt::Tensor x = (mt::randn(shape, {}, &g) * 2.0 + 0.5).to(dt);
        const mt::Tensor w = (mt::rand({C}, {}, &g) + 0.5).to(pdt), b = mt::randn({C}, {}, &g).to(pdt);
        const mt::Tensor rm0 = (mt::randn({C}, {}, &g) * 0.1).to(pdt), rv0 = (mt::rand({C}, {}, &g) + 0.5).to(pdt);
        for (bool training : {true, false}) {
          for (bool affine : {true, false}) {
            SCOPED_TRACE(trace(dt, std::string(training ? "training" : "eval") + (affine ? ", affine " : ", no affine ") +
                                       std::string(mt::to_string(pdt)) + ", " + std::to_string(shape.numel())));
            mt::Tensor rm_cpu = rm0.clone(), rv_cpu = rv0.clone(), rm_gpu = rm0.to(kGpu), rv_gpu = rv0.to(kGpu);
            const TwoRuns r = run_on_both(
                [&](const std::vector<mt::Tensor>& in) {
                  const bool gpu = in[0].device() == kGpu;
                  return F::batch_norm(in[0], gpu ? rm_gpu : rm_cpu, gpu ? rv_gpu : rv_cpu, affine ? in[1] : mt::Tensor(),
                                       affine ? in[2] : mt::Tensor(), training, 0.1, 1e-5);
                },
                affine ? std::vector<mt::Tensor>{x, w, b} : std::vector<mt::Tensor>{x}, 52);
            const auto tol = mt::testing::cuda_vs_cpu_rounded(dt, mt::testing::kCudaSumOrder);
            const auto ptol = mt::testing::cuda_vs_cpu_rounded(pdt, mt::testing::kCudaSumOrder);
            expect_close(r.gpu, r.cpu, tol, "forward");
            expect_grads_close(r, {tol, ptol, ptol}, "backward");
            expect_close(rm_gpu, rm_cpu, ptol, "running mean");
            expect_close(rv_gpu, rv_cpu, ptol, "running var");
          }
        }
      }
    }
  }
}

TEST(CudaBatchNorm, RunningStatisticsUpdateOfStridedStats) {
  MT_REQUIRE_GPU();
  mt::Generator g(53);
  const mt::Tensor x = mt::randn({8, 3, 5}, {}, &g);
  // Running statistics as every other element of a [6] buffer (stride 2).
  const mt::Tensor buf = mt::rand({2, 6}, {}, &g) + 0.5;
  mt::Tensor cpu = buf.clone(), gpu = buf.to(kGpu);
  const mt::Tensor y_cpu = F::batch_norm(x, cpu.select(0, 0).slice(0, 0, 6, 2), cpu.select(0, 1).slice(0, 0, 6, 2),
                                         mt::Tensor(), mt::Tensor(), true, 0.3);
  const mt::Tensor y_gpu = F::batch_norm(x.to(kGpu), gpu.select(0, 0).slice(0, 0, 6, 2),
                                         gpu.select(0, 1).slice(0, 0, 6, 2), mt::Tensor(), mt::Tensor(), true, 0.3);
  expect_close(y_gpu, y_cpu, mt::testing::kCudaSumOrder, "forward");
  expect_close(gpu, cpu, mt::testing::kCudaSumOrder, "running statistics (odd elements untouched)");
}

}  // namespace
