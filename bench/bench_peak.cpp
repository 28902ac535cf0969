// Per-core arithmetic peak of the instructions oneDNN's CPU GEMMs are built on, single thread:
//   fp32_fma_avx2  vfmadd231ps ymm  (8 lanes x 2 flops)            the fp32 kernels below AVX-512
//   fp32_fma       vfmadd231ps zmm  (16 lanes x 2 flops)           the fp32 kernels with AVX-512
//   bf16_dot       vdpbf16ps zmm    (16 lanes x 2 products x 2)    oneDNN 2.6's bf16 kernels without AMX
// A variant whose instructions the CPU (under MIXTRAIN_MAX_ISA, mixtrain/cpu.h) lacks is skipped
// with a line saying which level it needs.
// Each loop runs 24 independent accumulator chains, enough to hide the latency of either
// instruction, so the counter is the issue-rate bound. The ratio bf16_dot / fp32_fma bounds the
// bf16-over-fp32 GEMM speed-up available without AMX (docs/performance.md).
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <string>

#include "mixtrain/cpu.h"

namespace {

constexpr int kChains = 24;
constexpr long kInner = 1 << 20;

__attribute__((target("avx2,fma"))) float fma_loop_avx2(long iters) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(1e-8f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(a, b, acc[i]);
    asm volatile("" : "+x"(a), "+x"(b));
  }
  alignas(32) float lanes[8];
  float s = 0;
  for (int i = 0; i < kChains; ++i) {
    _mm256_store_ps(lanes, acc[i]);
    for (float v : lanes) s += v;
  }
  return s;
}

__attribute__((target("avx512f"))) float fma_loop(long iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1e-8f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(a, b, acc[i]);
    asm volatile("" : "+v"(a), "+v"(b));  // keeps the operands opaque to the optimiser
  }
  float s = 0;
  for (int i = 0; i < kChains; ++i) s += _mm512_reduce_add_ps(acc[i]);
  return s;
}

__attribute__((target("avx512f,avx512bf16"))) float dot_loop(long iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3280);  // 1, ~1.5e-8
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    asm volatile("" : "+v"(a), "+v"(b));
  }
  float s = 0;
  for (int i = 0; i < kChains; ++i) s += _mm512_reduce_add_ps(acc[i]);
  return s;
}

// False (and the benchmark skipped, saying why) when the level under the cap is below `needed`.
bool runs_here(benchmark::State& state, mixtrain::cpu::Isa needed) {
  namespace cpu = mixtrain::cpu;
  if (cpu::isa() >= needed) return true;
  const std::string why = std::string("skipped: needs the ") + std::string(cpu::to_string(needed)) + " level; " + cpu::describe();
  state.SkipWithError(why.c_str());
  return false;
}

void BM_Peak_fp32_fma_avx2(benchmark::State& state) {
  if (!runs_here(state, mixtrain::cpu::Isa::kAvx2)) return;
  for (auto _ : state) benchmark::DoNotOptimize(fma_loop_avx2(kInner));
  state.counters["GFLOP/s"] =
      benchmark::Counter(kInner * kChains * 16.0 / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Peak_fp32_fma(benchmark::State& state) {
  if (!runs_here(state, mixtrain::cpu::Isa::kAvx512)) return;
  for (auto _ : state) benchmark::DoNotOptimize(fma_loop(kInner));
  state.counters["GFLOP/s"] =
      benchmark::Counter(kInner * kChains * 32.0 / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Peak_bf16_dot(benchmark::State& state) {
  if (!runs_here(state, mixtrain::cpu::Isa::kAvx512Bf16)) return;
  for (auto _ : state) benchmark::DoNotOptimize(dot_loop(kInner));
  state.counters["GFLOP/s"] =
      benchmark::Counter(kInner * kChains * 64.0 / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_Peak_fp32_fma_avx2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Peak_fp32_fma)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Peak_bf16_dot)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
