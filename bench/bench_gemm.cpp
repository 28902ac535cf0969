// Square GEMM throughput through mt::matmul: C = A @ B for n in {256, 512, 1024, 2048}, reported as
// the counter "GFLOP/s" (2 n^3 flops per product, wall-clock time: oneDNN runs on OpenMP threads).
//
//   fp32           oneDNN f32 matmul
//   bf16           the default bf16 path (Bf16Path::kAuto: native with AMX or on AMD AVX512-BF16 cores, else via fp32)
//   bf16_native    oneDNN bf16 matmul (AVX512-BF16 dot products, fp32 accumulation); not run, with a
//                  line saying why, where oneDNN has no bf16 kernel (below AVX-512 or MIXTRAIN_MAX_ISA)
//   bf16_via_fp32  operands widened exactly to fp32, f32 matmul, result rounded to bf16
//   fp16           via fp32 (oneDNN 2.6 has no f16 matmul on CPUs)
//
// The label names the oneDNN implementation that ran (f32 for the via-fp32 rows). Run through
// bench/gemm_table.sh for medians over repetitions.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "kernels/linalg.h"
#include "mixtrain/cpu.h"
#include "mixtrain/factory.h"
#include "mixtrain/ops/linalg.h"

namespace mt = mixtrain;

namespace {

void BM_Gemm(benchmark::State& state, mt::DType dtype, mt::kernels::Bf16Path path) {
  const int64_t n = state.range(0);
  mt::kernels::set_bf16_path(path);
  mt::Generator gen(42);
  mt::Tensor a = mt::randn({n, n}, {}, &gen).to(dtype);
  mt::Tensor b = mt::randn({n, n}, {}, &gen).to(dtype);
  const bool native =
      dtype == mt::kFloat32 || (dtype == mt::kBFloat16 && mt::kernels::bf16_path() == mt::kernels::Bf16Path::kNative);
  mt::Tensor a_run = native ? a : a.to(mt::kFloat32), b_run = native ? b : b.to(mt::kFloat32);
  state.SetLabel(mt::kernels::matmul_impl_info(a_run, b_run, mt::Tensor(), mt::Tensor::empty({n, n}, a_run.dtype())));
  mt::matmul(a, b);  // warm-up: primitive creation, allocator cache, page faults
  for (auto _ : state) {
    mt::Tensor c = mt::matmul(a, b);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  mt::kernels::set_bf16_path(mt::kernels::Bf16Path::kAuto);
}

}  // namespace

// Wall-clock time by default (oneDNN runs on OpenMP threads). With OMP_NUM_THREADS=1 the CPU time
// of the one thread is used instead: on an idle machine the two agree, and on a shared one the CPU
// time leaves out the slices the OS gave to other processes (the stable number for ratios).
int main(int argc, char** argv) {
  using mt::kernels::Bf16Path;
  const char* threads = std::getenv("OMP_NUM_THREADS");
  const bool cpu_time = threads != nullptr && std::string(threads) == "1";
  const std::pair<const char*, std::pair<mt::DType, Bf16Path>> variants[] = {
      {"fp32", {mt::kFloat32, Bf16Path::kAuto}},           {"bf16", {mt::kBFloat16, Bf16Path::kAuto}},
      {"bf16_native", {mt::kBFloat16, Bf16Path::kNative}}, {"bf16_via_fp32", {mt::kBFloat16, Bf16Path::kFp32}},
      {"fp16", {mt::kFloat16, Bf16Path::kAuto}},
  };
  std::printf("cpu %s\n", mt::cpu::describe().c_str());
  for (const auto& [name, cfg] : variants) {
    if (cfg.second == Bf16Path::kNative) {
      const std::string why = mt::kernels::native_bf16_unavailable_reason();
      if (!why.empty()) {
        std::printf("BM_Gemm/%s: skipped: %s\n", name, why.c_str());
        continue;
      }
    }
    auto* b = benchmark::RegisterBenchmark((std::string("BM_Gemm/") + name).c_str(), BM_Gemm, cfg.first, cfg.second);
    b->Arg(256)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond);
    if (!cpu_time) b->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
