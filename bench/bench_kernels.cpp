// Hand-written CPU kernels at every vector level this CPU reaches: the AdamW step, max_pool2d's
// 2x2 stride-2 path, the fused causal attention, softmax, layer norm, GELU and the 16-bit
// conversions. Each benchmark runs at one cap (MIXTRAIN_MAX_ISA's levels through
// cpu::MaxIsaGuard), so one run shows what the AVX2 and AVX-512 kernels gain over the portable loops
// on the same CPU, and whether the AVX2 path keeps up with the AVX-512 one per vector lane.
// Counters: "GB/s", the bytes the kernel must read and write (for memory-bound kernels), and
// "GFLOP/s" for the attention (multiply-adds of the causal products as computed, x 2).
//
//   adamw/<layout>/<isa>   4M parameters: fp32 (params, grads, m, v), bf16+master (bf16 params and
//                          grads, fp32 masters and moments), compact (bf16 params, grads and m,
//                          packed low halves, fp32 v), kahan and stochastic (bf16 params, grads, m
//                          and v, no masters; kahan adds its bf16 compensation)
//   maxpool2x2/<dtype>/<isa>  [64, 32, 28, 28] -> [64, 32, 14, 14], forward and backward
//   attention/<dtype>/<isa>   GPT-mini's qkv_attention: qkv [16, 128, 768], 4 heads, causal,
//                             forward and backward; attention-cold/: the same with the caches
//                             evicted before each iteration (as in a training step)
//   softmax/<dtype>/<isa>     [4096, 1024] over the last dim, forward and backward
//   layer_norm/<dtype>/<isa>  GPT-mini's [2048, 256] with weight and bias, forward and backward
//   gelu/<dtype>/<isa>        GPT-mini's MLP activation [2048, 1024] (erf), forward and backward
//   gelu-recompute/<dtype>/<isa>/<how>  gelu_linear's backward elementwise work on GPT-mini's
//                             [2048, 1024]: gelu(x) recomputed and the input gradient, as two
//                             kernels (separate) or one pass sharing erf (fused)
//   bias_grad/<dtype>/<cols>  a linear layer's bias gradient: GPT-mini's output gradients
//                             [2048, cols] (cols 256, 768, 1024) summed over rows (kernels::sum_rows);
//                             bias_grad-cold/: the caches evicted before each iteration
//   convert/<from>-<to>/<isa> 4M elements, fp32 <-> bf16 and fp32 <-> fp16
#include <benchmark/benchmark.h>

#include <string>
#include <utility>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/linalg.h"
#include "mixtrain/cpu.h"
#include "mixtrain/factory.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/ops/elementwise.h"
#include "mixtrain/optim/adam.h"

namespace mt = mixtrain;

namespace {

struct AdamLayout {
  const char* name;
  mt::DType dtype;
  mt::optim::AdamOptions options;
  int64_t bytes_per_param;  // read + written by one step
};

void BM_AdamW(benchmark::State& state, AdamLayout layout, mt::cpu::Isa level) {
  mt::cpu::MaxIsaGuard cap(level);
  const int64_t n = int64_t{1} << 22;
  mt::Generator gen(1);
  mt::Tensor p = mt::randn({n}, {}, &gen).to(layout.dtype).requires_grad_();
  mt::optim::AdamW opt({p}, layout.options);
  p.set_grad(mt::randn({n}, {}, &gen).to(layout.dtype));
  opt.step();  // allocates the state
  for (auto _ : state) opt.step();
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(n * layout.bytes_per_param) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// Writes 64 MiB, more than the last-level cache of the CPUs mixtrain is measured on, so that the
// next iteration reads its inputs from memory as in a training step, where the other layers' work
// runs between an op's forward and its backward.
void evict_caches() {
  static std::vector<char> buffer(std::size_t{64} << 20);
  for (std::size_t i = 0; i < buffer.size(); i += 64) buffer[i] = static_cast<char>(buffer[i] + 1);
  benchmark::ClobberMemory();
}

// Forward + backward of a one-input op with an upstream gradient of the output's shape; with
// `cold`, the caches are evicted (untimed) before each iteration.
template <class Op>
void run_forward_backward(benchmark::State& state, mt::Tensor x, const mt::Tensor& gy, Op op, bool cold = false) {
  x.requires_grad_();
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      evict_caches();
      state.ResumeTiming();
    }
    mt::Tensor y = op(x);
    y.backward(gy);
    benchmark::DoNotOptimize(x.grad().raw_data());
    x.set_grad(mt::Tensor());
  }
}

void BM_MaxPool2x2(benchmark::State& state, mt::DType dtype, mt::cpu::Isa level) {
  mt::cpu::MaxIsaGuard cap(level);
  mt::Generator gen(2);
  mt::Tensor x = mt::randn({64, 32, 28, 28}, {}, &gen).to(dtype);
  const mt::nn::functional::Pool2dOptions o{.kernel_h = 2, .kernel_w = 2};
  mt::Tensor gy = mt::randn({64, 32, 14, 14}, {}, &gen).to(dtype);
  run_forward_backward(state, x, gy, [&](const mt::Tensor& t) { return mt::nn::functional::max_pool2d(t, o); });
  // Forward reads x, writes y and the argmax bytes; backward reads gy and the argmax, writes gx.
  const double elem = static_cast<double>(mt::element_size(dtype));
  const double in = 64.0 * 32 * 28 * 28, out = in / 4;
  state.counters["GB/s"] =
      benchmark::Counter((in * elem * 2 + out * elem * 2 + out * 2) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Attention(benchmark::State& state, mt::DType dtype, mt::cpu::Isa level, bool cold) {
  mt::cpu::MaxIsaGuard cap(level);
  const int64_t B = 16, T = 128, C = 256, H = 4;
  mt::Generator gen(3);
  mt::Tensor qkv = mt::randn({B, T, 3 * C}, {}, &gen).to(dtype);
  mt::Tensor gy = mt::randn({B, T, C}, {}, &gen).to(dtype);
  run_forward_backward(state, qkv, gy,
                       [=](const mt::Tensor& x) { return mt::nn::functional::qkv_attention(x, H, true); }, cold);
  // Causal products as computed: T * (T + 1) / 2 (query, key) pairs per head, D multiply-adds per
  // pair, in the forward's two products (scores, probabilities @ v) and the backward's five
  // (recomputed scores, dV, dP, dQ, dK).
  const double pairs = static_cast<double>(B * H) * T * (T + 1) / 2, D = static_cast<double>(C / H);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * pairs * D * (2 + 5) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// A memory-bound op on [rows, cols], forward and backward: forward reads x and writes y, backward
// reads gy and y (or x) and writes gx, five tensors' bytes in all.
template <class Op>
void run_rows(benchmark::State& state, mt::DType dtype, mt::cpu::Isa level, int64_t rows, int64_t cols, Op op) {
  mt::cpu::MaxIsaGuard cap(level);
  mt::Generator gen(4);
  run_forward_backward(state, mt::randn({rows, cols}, {}, &gen).to(dtype), mt::randn({rows, cols}, {}, &gen).to(dtype),
                       op);
  const double bytes = static_cast<double>(rows * cols * mt::element_size(dtype)) * 5;
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Softmax(benchmark::State& state, mt::DType dtype, mt::cpu::Isa level) {
  run_rows(state, dtype, level, 4096, 1024, [](const mt::Tensor& x) { return mt::nn::functional::softmax(x, -1); });
}

void BM_LayerNorm(benchmark::State& state, mt::DType dtype, mt::cpu::Isa level) {
  const int64_t C = 256;
  mt::Generator gen(5);
  mt::Tensor w = (mt::randn({C}, {}, &gen) * 0.1 + 1.0).requires_grad_();
  mt::Tensor b = mt::randn({C}, {}, &gen).requires_grad_();
  run_rows(state, dtype, level, 2048, C,
           [&](const mt::Tensor& x) { return mt::nn::functional::layer_norm(x, {C}, w, b); });
}

void BM_Gelu(benchmark::State& state, mt::DType dtype, mt::cpu::Isa level) {
  run_rows(state, dtype, level, 2048, 1024, [](const mt::Tensor& x) { return mt::gelu(x); });
}

void BM_GeluRecompute(benchmark::State& state, mt::DType dtype, mt::cpu::Isa level, bool fused) {
  namespace kn = mt::kernels;
  mt::cpu::MaxIsaGuard cap(level);
  mt::Generator gen(8);
  const mt::Tensor x = mt::randn({2048, 1024}, {}, &gen).to(dtype), g = mt::randn({2048, 1024}, {}, &gen).to(dtype);
  const mt::Tensor y = mt::Tensor::empty(x.shape(), dtype), gx = mt::Tensor::empty(x.shape(), dtype);
  for (auto _ : state) {
    if (fused) {
      kn::gelu_forward_backward_kernel()(x.device(), dtype)(y, gx, g, x);
    } else {
      kn::unary_kernel(kn::UnaryOp::kGelu)(x.device(), dtype)(y, x, {});
      kn::unary_backward_kernel(kn::UnaryOp::kGelu)(x.device(), dtype)(gx, g, x, {});
    }
    benchmark::DoNotOptimize(gx.raw_data());
  }
  const double bytes = 4.0 * static_cast<double>(x.numel() * mt::element_size(dtype));  // x, g in; y, gx out
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_BiasGrad(benchmark::State& state, mt::DType dtype, int64_t cols, bool cold) {
  const int64_t rows = 2048;
  mt::Generator gen(6);
  const mt::Tensor g = mt::randn({rows, cols}, {}, &gen).to(dtype);
  const mt::Tensor out = mt::Tensor::empty({cols}, dtype);
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      evict_caches();
      state.ResumeTiming();
    }
    mt::kernels::sum_rows(g, out);
    benchmark::DoNotOptimize(out.raw_data());
  }
  const double bytes = static_cast<double>(rows * cols * mt::element_size(dtype));
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Convert(benchmark::State& state, mt::DType from, mt::DType to, mt::cpu::Isa level) {
  mt::cpu::MaxIsaGuard cap(level);
  mt::Generator gen(7);
  const int64_t n = int64_t{1} << 22;
  mt::Tensor x = mt::randn({n}, {}, &gen).to(from);
  for (auto _ : state) {
    mt::Tensor y = x.to(to);
    benchmark::DoNotOptimize(y.raw_data());
  }
  const double bytes = static_cast<double>(n) * static_cast<double>(mt::element_size(from) + mt::element_size(to));
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  using mt::cpu::Isa;
  std::vector<Isa> levels;
  for (Isa level : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512})
    if (mt::cpu::detected_isa() >= level) levels.push_back(level);
  // The conversions have one more level: AVX512-BF16's rounding instruction.
  std::vector<Isa> convert_levels = levels;
  if (mt::cpu::detected_isa() >= Isa::kAvx512Bf16) convert_levels.push_back(Isa::kAvx512Bf16);
  auto add = [](const std::string& name, auto fn, auto... args) {
    benchmark::RegisterBenchmark(name.c_str(), fn, args...)->Unit(benchmark::kMillisecond)->UseRealTime();
  };
  const AdamLayout layouts[] = {
      {"fp32", mt::kFloat32, {}, 4 * (2 + 1 + 2 + 2)},
      {"bf16+master", mt::kBFloat16, {.master_weights = true}, 2 + 2 + 4 * 2 + 4 * 2 + 4 * 2},
      {"compact", mt::kBFloat16, {.master_weights = true, .packed_master = true, .exp_avg_dtype = mt::kBFloat16},
       2 * 2 + 2 + 2 * 2 + 2 * 2 + 4 * 2},
      {"kahan", mt::kBFloat16,
       {.master_weights = false,
        .exp_avg_dtype = mt::kBFloat16,
        .exp_avg_sq_dtype = mt::kBFloat16,
        .bf16_update = mt::optim::Bf16Update::kKahan},
       2 * 2 + 2 + 2 * 2 + 2 * 2 + 2 * 2},
      {"stochastic", mt::kBFloat16,
       {.master_weights = false,
        .exp_avg_dtype = mt::kBFloat16,
        .exp_avg_sq_dtype = mt::kBFloat16,
        .bf16_update = mt::optim::Bf16Update::kStochastic},
       2 * 2 + 2 + 2 * 2 + 2 * 2},
  };
  for (const AdamLayout& l : layouts)
    for (Isa level : levels)
      add(std::string("adamw/") + l.name + "/" + std::string(mt::cpu::to_string(level)), BM_AdamW, l, level);
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16, mt::kFloat16})
    for (Isa level : levels)
      add("maxpool2x2/" + std::string(mt::to_string(dt)) + "/" + std::string(mt::cpu::to_string(level)), BM_MaxPool2x2, dt, level);
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16})
    for (Isa level : levels) {
      const std::string suffix = std::string(mt::to_string(dt)) + "/" + std::string(mt::cpu::to_string(level));
      add("attention/" + suffix, BM_Attention, dt, level, false);
      add("attention-cold/" + suffix, BM_Attention, dt, level, true);
      add("softmax/" + suffix, BM_Softmax, dt, level);
      add("layer_norm/" + suffix, BM_LayerNorm, dt, level);
      add("gelu/" + suffix, BM_Gelu, dt, level);
      for (bool fused : {false, true})
        add("gelu-recompute/" + suffix + (fused ? "/fused" : "/separate"), BM_GeluRecompute, dt, level, fused);
    }
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16})
    for (int64_t cols : {256, 768, 1024})
      for (bool cold : {false, true})
        add(std::string(cold ? "bias_grad-cold/" : "bias_grad/") + std::string(mt::to_string(dt)) + "/" + std::to_string(cols),
            BM_BiasGrad, dt, cols, cold);
  for (auto [from, to] : {std::pair{mt::kFloat32, mt::kBFloat16}, std::pair{mt::kBFloat16, mt::kFloat32},
                          std::pair{mt::kFloat32, mt::kFloat16}, std::pair{mt::kFloat16, mt::kFloat32}})
    for (Isa level : convert_levels)
      add("convert/" + std::string(mt::to_string(from)) + "-" + std::string(mt::to_string(to)) + "/" + std::string(mt::cpu::to_string(level)),
          BM_Convert, from, to, level);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
