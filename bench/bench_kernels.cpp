// Hand-written CPU kernels at every vector level this CPU reaches: the AdamW step and max_pool2d's
// 2x2 stride-2 path (forward + backward). Each benchmark runs at one cap (MIXTRAIN_MAX_ISA's levels
// through cpu::MaxIsaGuard), so one run shows what the AVX2 and AVX-512 kernels gain over the
// portable loops on the same CPU. Counter "GB/s": the bytes the kernel must read and write.
//
//   adamw/<layout>/<isa>   4M parameters: fp32 (params, grads, m, v), bf16+master (bf16 params and
//                          grads, fp32 masters and moments), compact (bf16 params, grads and m,
//                          packed low halves, fp32 v), kahan and stochastic (bf16 params, grads, m
//                          and v, no masters; kahan adds its bf16 compensation)
//   maxpool2x2/<dtype>/<isa>  [64, 32, 28, 28] -> [64, 32, 14, 14], forward and backward
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "mixtrain/cpu.h"
#include "mixtrain/factory.h"
#include "mixtrain/nn/functional.h"
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

void BM_MaxPool2x2(benchmark::State& state, mt::DType dtype, mt::cpu::Isa level) {
  mt::cpu::MaxIsaGuard cap(level);
  mt::Generator gen(2);
  mt::Tensor x = mt::randn({64, 32, 28, 28}, {}, &gen).to(dtype).requires_grad_();
  const mt::nn::functional::Pool2dOptions o{.kernel_h = 2, .kernel_w = 2};
  mt::Tensor gy = mt::randn({64, 32, 14, 14}, {}, &gen).to(dtype);
  for (auto _ : state) {
    mt::Tensor y = mt::nn::functional::max_pool2d(x, o);
    y.backward(gy);
    benchmark::DoNotOptimize(x.grad().raw_data());
    x.set_grad(mt::Tensor());
  }
  // Forward reads x, writes y and the argmax bytes; backward reads gy and the argmax, writes gx.
  const double elem = static_cast<double>(mt::element_size(dtype));
  const double in = 64.0 * 32 * 28 * 28, out = in / 4;
  state.counters["GB/s"] =
      benchmark::Counter((in * elem * 2 + out * elem * 2 + out * 2) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  using mt::cpu::Isa;
  std::vector<Isa> levels;
  for (Isa level : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512})
    if (mt::cpu::detected_isa() >= level) levels.push_back(level);
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
      benchmark::RegisterBenchmark((std::string("adamw/") + l.name + "/" + mt::cpu::name(level)).c_str(), BM_AdamW, l,
                                   level)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16, mt::kFloat16})
    for (Isa level : levels)
      benchmark::RegisterBenchmark((std::string("maxpool2x2/") + std::string(mt::name(dt)) + "/" + mt::cpu::name(level)).c_str(),
                                   BM_MaxPool2x2, dt, level)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
