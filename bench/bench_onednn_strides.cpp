// oneDNN matmul with one operand strided by a multiple of 4 KiB along K, read in place (a view)
// against copied with a padded stride first (the reorder timed with the product): the measurement
// behind pad_operand in src/kernels/onednn/matmul.cpp. Below AVX-512 oneDNN 2.6 runs fp32 matmuls on
// its AVX2 sgemm ("gemm:jit"), which is where the layout matters:
//   MIXTRAIN_MAX_ISA=avx2 OMP_NUM_THREADS=2 build/bench/mixtrain_bench_onednn_strides
// Arguments: operand (0: A [M, K] column-major, column stride M; 1: B [K, N] row-major, row stride
// N), M, K, N, copy (0: view, 1: padded copy). Counter GFLOP/s = 2 M N K per iteration.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <optional>
#include <unordered_map>

#include "kernels/onednn/common.h"

namespace {

using dnnl::memory;
namespace onednn = mixtrain::kernels::onednn;

constexpr int64_t kPadFloats = 16;  // as src/kernels/onednn/matmul.cpp

// 64-byte aligned fp32 buffer (the caching allocator's alignment), filled with `value`.
struct Buffer {
  explicit Buffer(size_t bytes, float value) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    data = static_cast<float*>(std::aligned_alloc(64, rounded));
    for (size_t i = 0; i < rounded / sizeof(float); ++i) data[i] = value;
  }
  ~Buffer() { std::free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* data;
};

void BM_StridedOperand(benchmark::State& state) {
  const bool pad_b = state.range(0) == 1;
  const int64_t M = state.range(1), K = state.range(2), N = state.range(3);
  const bool copy = state.range(4) == 1;
  const auto f32 = memory::data_type::f32;
  const memory::desc a_md({M, K}, f32, pad_b ? memory::dims{K, 1} : memory::dims{1, M});
  const memory::desc b_md({K, N}, f32, memory::dims{N, 1});
  const memory::desc c_md({M, N}, f32, memory::dims{N, 1});
  // The operand under test, as the product reads it: in place, or its padded copy.
  const memory::desc& src_md = pad_b ? b_md : a_md;
  const memory::desc padded_md(src_md.dims(), f32,
                               pad_b ? memory::dims{N + kPadFloats, 1} : memory::dims{1, M + kPadFloats});
  const memory::desc& read_md = copy ? padded_md : src_md;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::library);
  const dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(pad_b ? a_md : read_md, pad_b ? read_md : b_md, c_md), attr, onednn::engine());
  const dnnl::matmul product(pd);
  Buffer a(a_md.get_size(), 0.5f), b(b_md.get_size(), 0.25f), c(c_md.get_size(), 0.0f),
      padded(padded_md.get_size(), 0.0f);
  memory a_mem(a_md, onednn::engine(), a.data), b_mem(b_md, onednn::engine(), b.data),
      c_mem(c_md, onednn::engine(), c.data), padded_mem(padded_md, onednn::engine(), padded.data);
  std::optional<dnnl::reorder> reorder;
  if (copy) reorder.emplace(dnnl::reorder::primitive_desc(onednn::engine(), src_md, onednn::engine(), padded_md));
  const memory& read_mem = copy ? padded_mem : (pad_b ? b_mem : a_mem);
  const std::unordered_map<int, memory> args{{DNNL_ARG_SRC, pad_b ? a_mem : read_mem},
                                             {DNNL_ARG_WEIGHTS, pad_b ? read_mem : b_mem},
                                             {DNNL_ARG_DST, c_mem}};
  dnnl::stream& s = onednn::stream();
  for (auto _ : state) {
    if (reorder) reorder->execute(s, pad_b ? b_mem : a_mem, padded_mem);
    product.execute(s, args);
    s.wait();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(M * N * K), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
  state.SetLabel(std::string(pd.impl_info_str()) + (copy ? ", padded copy" : ", view"));
}

void strided_cases(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1024, 4096})  // A column-major: stride along K = M floats
    for (int64_t k : {256, 2048})
      for (int64_t n : {32, 64, 256, 512})
        for (int64_t copy : {0, 1}) b->Args({0, m, k, n, copy});
  for (int64_t n : {1024, 4096})  // B row-major: stride along K = N floats
    for (int64_t k : {256, 2048})
      for (int64_t m : {32, 64, 256, 512})
        for (int64_t copy : {0, 1}) b->Args({1, m, k, n, copy});
}

BENCHMARK(BM_StridedOperand)
    ->ArgNames({"B", "M", "K", "N", "copy"})
    ->Apply(strided_cases)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
