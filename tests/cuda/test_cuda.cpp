// The CUDA backend against the CPU: every CUDA kernel family on the same inputs as its CPU kernel
// (bit for bit where the math is exact or the operations are the same IEEE ones, else within the
// tolerances of support/tolerances.h), the GradScaler and AdamW trajectories on both devices, and
// the caching allocator's steady state. Tests that need a GPU skip, with the driver's reason, where
// none is present; CudaAvailability runs everywhere, CUDA build or not.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/cuda_test_helpers.h"
#include "mixtrain/cuda.h"
#include "mixtrain/mixtrain.h"
#include "support/expect_error.h"
#include "support/tolerances.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;

namespace {

using mt::testing::gpu::bytes_of;
using mt::testing::gpu::expect_close;
using mt::testing::gpu::kGpu;
using mt::testing::gpu::kHost;

// ---- everywhere
TEST(CudaAvailability, ReasonAndRefusalAreClearWithoutAGpu) {
  EXPECT_EQ(mt::cuda::is_available(), mt::cuda::device_count() > 0);
  EXPECT_EQ(mt::cuda::is_available(), mt::cuda::unavailable_reason().empty());
  if (mt::cuda::is_available()) GTEST_SKIP() << "a GPU is present: the refusal cannot be shown";
  // No GPU (or no CUDA in this build): making a tensor there is a clear mt::Error naming the reason,
  // never a crash.
  EXPECT_MT_ERROR(mt::zeros({2}, {.device = kGpu}), "cuda:0");
  EXPECT_MT_ERROR(mt::ones({2}).to(kGpu), "not available");
  EXPECT_FALSE(mt::cuda::unavailable_reason().empty());
}

TEST(CudaAvailability, Tf32IsOffUnlessAskedFor) {
  EXPECT_FALSE(mt::cuda::allow_tf32()) << "fp32 matmuls must be fp32 by default";
  mt::cuda::set_allow_tf32(true);
  EXPECT_TRUE(mt::cuda::allow_tf32());
  mt::cuda::set_allow_tf32(false);
  EXPECT_FALSE(mt::cuda::allow_tf32());
}

// ---- copies, conversions, fills, random numbers
TEST(CudaCopy, EveryDtypeRoundTripsAndConvertsLikeTheCpu) {
  MT_REQUIRE_GPU();
  mt::Generator g(1);
  const std::vector<mt::DType> dtypes{mt::kFloat32, mt::kFloat64, mt::kFloat16, mt::kBFloat16,
                                      mt::kInt32,   mt::kInt64,   mt::kUInt8,   mt::kBool};
  // fp32 values covering normals, subnormals of both 16-bit types, ties and overflow.
  mt::Tensor x = mt::randn({4096}, {}, &g) * 1000.0;
  x = mt::cat({x, mt::randn({4096}, {}, &g) * 1e-6, mt::from_vector<float>({65520.f, 65519.f, 3.4e38f, -0.0f, 1e-45f})});
  for (mt::DType to : dtypes) {
    SCOPED_TRACE(mt::to_string(to));
    const mt::Tensor cpu = x.to(to);
    EXPECT_EQ(bytes_of(x.to(kGpu).to(to)), bytes_of(cpu)) << "fp32 -> dtype on the GPU";
    EXPECT_EQ(bytes_of(cpu.to(kGpu)), bytes_of(cpu)) << "host -> device -> host keeps every byte";
    for (mt::DType back : dtypes) EXPECT_EQ(bytes_of(cpu.to(kGpu).to(back)), bytes_of(cpu.to(back))) << mt::to_string(back);
  }
  // Strided views are copied as their values.
  const mt::Tensor m = mt::randn({37, 53}, {}, &g);
  EXPECT_EQ(bytes_of(m.to(kGpu).t().contiguous()), bytes_of(m.t().contiguous()));
}

TEST(CudaCopy, FillsAndRandomFillsDrawTheCpusValues) {
  MT_REQUIRE_GPU();
  for (mt::DType dt : {mt::kFloat32, mt::kFloat16, mt::kBFloat16, mt::kFloat64}) {
    SCOPED_TRACE(mt::to_string(dt));
    EXPECT_EQ(bytes_of(mt::full({1000}, 0.1, {.dtype = dt, .device = kGpu})), bytes_of(mt::full({1000}, 0.1, {.dtype = dt})));
    mt::Generator a(42), b(42);
    // Uniform: the same Philox bits, the same arithmetic -> the same values.
    EXPECT_EQ(bytes_of(mt::rand({4099}, {.dtype = dt, .device = kGpu}, &a)), bytes_of(mt::rand({4099}, {.dtype = dt}, &b)));
    // Normal: CUDA's fp64 log/cos may differ from glibc's in the last bits of the fp64 value.
    expect_close(mt::randn({4099}, {.dtype = dt, .device = kGpu}, &a), mt::randn({4099}, {.dtype = dt}, &b),
                 mt::testing::kCudaTranscendental, "randn");
  }
  mt::Generator a(5), b(5);
  EXPECT_EQ(bytes_of(mt::randint(-7, 300, {999}, {.dtype = mt::kInt64, .device = kGpu}, &a)),
            bytes_of(mt::randint(-7, 300, {999}, {.dtype = mt::kInt64}, &b)));
}

// ---- elementwise
TEST(CudaElementwise, UnaryForwardAndBackwardMatchTheCpu) {
  MT_REQUIRE_GPU();
  mt::Generator g(2);
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16, mt::kFloat16}) {
    SCOPED_TRACE(mt::to_string(dt));
    const mt::Tensor x = (mt::randn({3, 257}, {}, &g) * 3.0).to(dt);
    const mt::Tensor pos = (mt::rand({3, 257}, {}, &g) + 0.1).to(dt);
    const auto tol = mt::testing::cuda_vs_cpu(dt);
    struct Case {
      const char* name;
      mt::Tensor (*f)(const mt::Tensor&);
      bool positive;
    };
    const Case cases[] = {
        {"exp", [](const mt::Tensor& t) { return mt::exp(t); }, false},
        {"log", [](const mt::Tensor& t) { return mt::log(t); }, true},
        {"sqrt", [](const mt::Tensor& t) { return mt::sqrt(t); }, true},
        {"rsqrt", [](const mt::Tensor& t) { return mt::rsqrt(t); }, true},
        {"tanh", [](const mt::Tensor& t) { return mt::tanh(t); }, false},
        {"sigmoid", [](const mt::Tensor& t) { return mt::sigmoid(t); }, false},
        {"relu", [](const mt::Tensor& t) { return mt::relu(t); }, false},
        {"gelu", [](const mt::Tensor& t) { return mt::gelu(t); }, false},
        {"gelu_tanh", [](const mt::Tensor& t) { return mt::gelu(t, mt::GeluApproximation::kTanh); }, false},
        {"silu", [](const mt::Tensor& t) { return mt::silu(t); }, false},
        {"clamp", [](const mt::Tensor& t) { return mt::clamp(t, -1.0, 2.0); }, false},
        {"pow", [](const mt::Tensor& t) { return mt::pow(t, 1.7); }, true},
    };
    for (const Case& c : cases) {
      const mt::Tensor in = c.positive ? pos : x;
      mt::Tensor xc = in.clone().requires_grad_(true), xg = in.to(kGpu).requires_grad_(true);
      const mt::Tensor yc = c.f(xc), yg = c.f(xg);
      expect_close(yg, yc, tol, c.name);
      const mt::Tensor seed = mt::randn(yc.shape(), {}, &g).to(dt);
      yc.backward(seed);
      yg.backward(seed.to(kGpu));
      expect_close(xg.grad(), xc.grad(), tol, c.name);
    }
  }
}

TEST(CudaElementwise, BinaryWithBroadcastingIsExact) {
  MT_REQUIRE_GPU();
  mt::Generator g(3);
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16, mt::kFloat16, mt::kFloat64}) {
    SCOPED_TRACE(mt::to_string(dt));
    const mt::Tensor a = mt::randn({4, 1, 33}, {}, &g).to(dt), b = (mt::rand({5, 1}, {}, &g) + 0.5).to(dt);
    const mt::Tensor ag = a.to(kGpu), bg = b.to(kGpu);
    // One IEEE operation and one rounding on both devices: the same bits.
    EXPECT_EQ(bytes_of(ag + bg), bytes_of(a + b));
    EXPECT_EQ(bytes_of(mt::sub(ag, bg, 0.5)), bytes_of(mt::sub(a, b, 0.5)));
    EXPECT_EQ(bytes_of(ag * bg), bytes_of(a * b));
    EXPECT_EQ(bytes_of(ag / bg), bytes_of(a / b));
    EXPECT_EQ(bytes_of(mt::where(mt::gt(ag, 0.0), ag, bg)), bytes_of(mt::where(mt::gt(a, 0.0), a, b)));
    EXPECT_EQ(bytes_of(mt::masked_fill(ag, mt::lt(ag, 0.0), -3.0)), bytes_of(mt::masked_fill(a, mt::lt(a, 0.0), -3.0)));
    EXPECT_EQ(bytes_of(mt::eq(ag.t().contiguous(), ag.t())), bytes_of(mt::eq(a.t().contiguous(), a.t())));
  }
}

// ---- reductions
TEST(CudaReduce, SumMeanAmaxArgmaxMatchTheCpu) {
  MT_REQUIRE_GPU();
  mt::Generator g(4);
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16, mt::kFloat16}) {
    SCOPED_TRACE(mt::to_string(dt));
    const mt::Tensor x = mt::randn({6, 1000, 7}, {}, &g).to(dt);
    const mt::Tensor xg = x.to(kGpu);
    const auto tol = mt::testing::kCudaSumOrder;
    for (const mt::Shape& dims : {mt::Shape{1}, mt::Shape{2}, mt::Shape{0, 1}, mt::Shape{}}) {
      expect_close(mt::sum(xg, dims), mt::sum(x, dims), mt::testing::cuda_vs_cpu(dt, tol), "sum");
      expect_close(mt::mean(xg, dims), mt::mean(x, dims), mt::testing::cuda_vs_cpu(dt, tol), "mean");
      EXPECT_EQ(bytes_of(mt::amax(xg, dims)), bytes_of(mt::amax(x, dims))) << "max is exact";
    }
    EXPECT_EQ(bytes_of(mt::argmax(xg, 2)), bytes_of(mt::argmax(x, 2)));
    EXPECT_EQ(bytes_of(mt::argmax(xg, 1)), bytes_of(mt::argmax(x, 1)));
    expect_close(mt::sum_to(xg, {1, 1000, 1}), mt::sum_to(x, {1, 1000, 1}), mt::testing::cuda_vs_cpu(dt, tol), "sum_to");
  }
  // NaN propagates through max, as on the CPU.
  const mt::Tensor n = mt::from_vector<float>({0.0f, NAN, 1.0f, 2.0f}, {2, 2});
  EXPECT_TRUE(std::isnan(mt::amax(n.to(kGpu)).item<float>()));
}

// ---- matmul
TEST(CudaMatmul, EveryLayoutAndDtypeMatchesTheCpu) {
  MT_REQUIRE_GPU();
  mt::Generator g(5);
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16, mt::kFloat16, mt::kFloat64}) {
    SCOPED_TRACE(mt::to_string(dt));
    const auto tol = mt::testing::cuda_gemm(dt);
    const mt::Tensor a = mt::randn({2, 3, 65, 130}, {}, &g).to(dt), b = mt::randn({1, 3, 130, 47}, {}, &g).to(dt);
    expect_close(mt::matmul(a.to(kGpu), b.to(kGpu)), mt::matmul(a, b), tol, "batched, broadcast");
    const mt::Tensor w = mt::randn({47, 130}, {}, &g).to(dt), bias = mt::randn({47}, {}, &g).to(dt);
    const mt::Tensor x = mt::randn({65, 130}, {}, &g).to(dt);
    expect_close(mt::linear(x.to(kGpu), w.to(kGpu), bias.to(kGpu)), mt::linear(x, w, bias), tol, "linear + bias");
    expect_close(mt::matmul(x.t().to(kGpu).t(), w.to(kGpu).t()), mt::matmul(x, w.t()), tol, "both transposed");
    // A layout cuBLASLt cannot take (a column slice with a non-unit stride) is copied first.
    const mt::Tensor wide = mt::randn({65, 260}, {}, &g).to(dt);
    const mt::Tensor sliced_cpu = wide.transpose(0, 1).reshape({2, 130, 65}).select(0, 0).t();
    const mt::Tensor sliced_gpu = wide.to(kGpu).transpose(0, 1).reshape({2, 130, 65}).select(0, 0).t();
    expect_close(mt::matmul(sliced_gpu, w.to(kGpu).t()), mt::matmul(sliced_cpu, w.t()), tol, "odd strides");
  }
}

// ---- optimizers and the scaler: the same IEEE operations in the same order -> the same bits.
std::vector<std::vector<uint8_t>> train_steps(mt::Device device, mt::DType autocast_dtype, bool inject_inf) {
  mt::manual_seed(3);
  const mt::Device previous = mt::default_device();
  mt::set_default_device(kHost);
  mt::nn::Sequential model(mt::nn::Linear(6, 8), mt::nn::ReLU(), mt::nn::Linear(8, 3));
  mt::set_default_device(previous);
  model.to(device);
  mt::optim::AdamW opt(model.parameters(), {.lr = 0.01});
  mt::amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
  mt::Generator g(11);
  const mt::Tensor x = mt::randn({16, 6}, {}, &g);
  const mt::Tensor target = mt::randint(0, 3, {16}, {.dtype = mt::kInt64}, &g);
  std::vector<std::vector<uint8_t>> out;
  for (int step = 0; step < 6; ++step) {
    opt.zero_grad();
    mt::Tensor loss;
    {
      mt::amp::Autocast ac(device.type, autocast_dtype);
      mt::Tensor logits = model(x.to(device));
      loss = F::cross_entropy(logits.to(mt::kFloat32), target.to(device));
    }
    if (inject_inf && step == 2) loss = loss * INFINITY;
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    out.push_back(bytes_of(mt::scalar_tensor(scaler.get_scale())));
  }
  for (const mt::Tensor& p : model.parameters()) out.push_back(bytes_of(p));
  return out;
}

TEST(CudaOptim, AdamWAndGradScalerTrajectoriesAreTheCpus) {
  MT_REQUIRE_GPU();
  // fp32: matmuls agree only to rounding (another summation order), so the parameters are compared
  // with the optimizer fed identical gradients below; here the scaler's decisions must match.
  for (bool inject : {false, true}) {
    SCOPED_TRACE(inject ? "inf injected at step 2" : "clean");
    const auto cpu = train_steps(kHost, mt::kBFloat16, inject), gpu = train_steps(kGpu, mt::kBFloat16, inject);
    for (int step = 0; step < 6; ++step) EXPECT_EQ(gpu[step], cpu[step]) << "scale after step " << step;
  }
}

TEST(CudaOptim, AdamStepGivesTheCpusBits) {
  MT_REQUIRE_GPU();
  mt::Generator g(6);
  for (mt::DType pd : {mt::kFloat32, mt::kBFloat16, mt::kFloat16}) {
    for (bool packed : {false, true}) {
      if (packed && pd != mt::kBFloat16) continue;
      SCOPED_TRACE(std::string(mt::to_string(pd)) + (packed ? " packed master" : ""));
      const mt::Tensor p0 = mt::randn({3000}, {}, &g).to(pd), q0 = mt::randn({70, 3}, {}, &g).to(pd);
      std::vector<mt::Tensor> grads;
      for (int s = 0; s < 3; ++s) grads.push_back(mt::randn({3000}, {}, &g).to(pd) * 1e-2);
      auto run = [&](mt::Device d) {
        mt::Tensor p = p0.to(d).clone().requires_grad_(true), q = q0.to(d).clone().requires_grad_(true);
        mt::optim::AdamW opt({p, q}, {.lr = 0.05, .weight_decay = 0.1, .packed_master = packed});
        for (const mt::Tensor& gr : grads) {
          p.set_grad(gr.to(d));
          q.set_grad(mt::full({70, 3}, 0.25, {.dtype = pd, .device = d}));
          opt.step();
        }
        return std::make_pair(bytes_of(p), bytes_of(q));
      };
      EXPECT_EQ(run(kGpu), run(kHost));
    }
  }
}

TEST(CudaOptim, ClipGradNormMatchesTheCpu) {
  MT_REQUIRE_GPU();
  mt::Generator g(7);
  const mt::Tensor a = mt::randn({1000}, {}, &g), b = mt::randn({30, 30}, {}, &g).to(mt::kBFloat16);
  auto norm = [&](mt::Device d, double p) {
    mt::Tensor x = a.to(d).clone().requires_grad_(true), y = b.to(d).clone().requires_grad_(true);
    x.set_grad(a.to(d) * 3.0);
    // A copy: on the host, b.to(d) is b itself, and clipping would scale it for every later call.
    y.set_grad(b.to(d).clone());
    return mt::optim::clip_grad_norm_({x, y}, 1.0, p);
  };
  for (double p : {1.0, 2.0, 3.0, static_cast<double>(INFINITY)}) EXPECT_NEAR(norm(kGpu, p), norm(kHost, p), 1e-5 * norm(kHost, p)) << p;
}

// ---- memory
TEST(CudaMemory, ATrainingStepReachesASteadyStateWithoutCudaMalloc) {
  MT_REQUIRE_GPU();
  mt::memory::empty_cache(kGpu);
  auto step = [&] {
    mt::Tensor x = mt::randn({64, 300}, {.device = kGpu});
    mt::Tensor w = mt::randn({300, 200}, {.device = kGpu}).requires_grad_(true);
    mt::Tensor loss = mt::sum(mt::relu(mt::matmul(x, w)));
    loss.backward();
  };
  step();
  step();
  const int64_t after_warmup = mt::memory::stats(kGpu).system_allocations;
  for (int i = 0; i < 5; ++i) step();
  EXPECT_EQ(mt::memory::stats(kGpu).system_allocations, after_warmup) << "no cudaMalloc in the steady state";
  EXPECT_EQ(mt::memory::stats(kGpu).current_bytes, 0);
  const mt::Tensor t = mt::empty({1000}, {.dtype = mt::kBFloat16, .device = kGpu});
  EXPECT_EQ(mt::memory::stats(kGpu).current_bytes, 2000) << "bytes are counted as asked for";
}

}  // namespace
