// oneDNN matmul with one operand strided by a multiple of 4 KiB along K, read in place (a view)
// against copied with a padded stride first (the reorder timed with the product): the measurement
// behind pad_operand in src/backends/cpu/kernels/onednn/matmul.cpp. Below AVX-512 oneDNN 2.6 runs fp32 matmuls on
// its AVX2 sgemm ("gemm:jit"), which is where the layout matters:
//   MIXTRAIN_MAX_ISA=avx2 OMP_NUM_THREADS=2 build/bench/mixtrain_bench_onednn_strides
// BM_TransposedA below: the same question for a transposed operand at the native level.
// Arguments (BM_StridedOperand): operand (0: A [M, K] column-major, column stride M; 1: B [K, N] row-major, row stride
// N), M, K, N, copy (0: view, 1: padded copy). Counter GFLOP/s = 2 M N K per iteration.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <optional>
#include <unordered_map>

#include "backends/cpu/kernels/onednn/common.h"

namespace {

using dnnl::memory;
namespace onednn = mixtrain::kernels::onednn;

constexpr int64_t kPadFloats = 16;  // as src/backends/cpu/kernels/onednn/matmul.cpp

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

// A transposed A (column-major [M, K], as dY^T in a weight gradient dW = dY^T X) read in place
// against copied into row-major first (the transposing reorder timed with the product), in fp32 and
// bf16, at the level oneDNN picks natively: what keeps mixtrain reading transposed views in place at
// AVX-512 (docs/notes/design-choices.md). Arguments: M, K, N, bf16 (0/1), copy (0: view, 1: copy).
void BM_TransposedA(benchmark::State& state) {
  const int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  const bool bf16 = state.range(3) == 1, copy = state.range(4) == 1;
  const auto dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  const memory::desc a_md({M, K}, dt, memory::dims{1, M});  // column-major: the transposed view
  const memory::desc row_md({M, K}, dt, memory::dims{K, 1});
  const memory::desc b_md({K, N}, dt, memory::dims{N, 1});
  const memory::desc c_md({M, N}, memory::data_type::f32, memory::dims{N, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::library);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(copy ? row_md : a_md, b_md, c_md), attr,
                                        onednn::engine());
  const dnnl::matmul product(pd);
  Buffer a(a_md.get_size(), 0.0f), row(row_md.get_size(), 0.0f), b(b_md.get_size(), 0.0f), c(c_md.get_size(), 0.0f);
  memory a_mem(a_md, onednn::engine(), a.data), row_mem(row_md, onednn::engine(), row.data),
      b_mem(b_md, onednn::engine(), b.data), c_mem(c_md, onednn::engine(), c.data);
  std::optional<dnnl::reorder> reorder;
  if (copy) reorder.emplace(dnnl::reorder::primitive_desc(onednn::engine(), a_md, onednn::engine(), row_md));
  const std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, copy ? row_mem : a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}};
  dnnl::stream& s = onednn::stream();
  for (auto _ : state) {
    if (reorder) reorder->execute(s, a_mem, row_mem);
    product.execute(s, args);
    s.wait();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(M * N * K), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
  state.SetLabel(std::string(pd.impl_info_str()) + (copy ? ", row-major copy" : ", view"));
}

// GPT-mini's weight gradients (batch 16 x 128 tokens = K of 2048): [out, in] = [256|768|1024, 256|1024].
void transposed_cases(benchmark::internal::Benchmark* b) {
  for (auto [m, n] : {std::pair<int64_t, int64_t>{256, 1024}, {1024, 256}, {768, 256}, {256, 256}})
    for (int64_t bf16 : {0, 1})
      for (int64_t copy : {0, 1}) b->Args({m, 2048, n, bf16, copy});
}

BENCHMARK(BM_TransposedA)
    ->ArgNames({"M", "K", "N", "bf16", "copy"})
    ->Apply(transposed_cases)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK(BM_StridedOperand)
    ->ArgNames({"B", "M", "K", "N", "copy"})
    ->Apply(strided_cases)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
