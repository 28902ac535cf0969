// GEMM throughput of mt::matmul on a GPU (cuBLASLt through the CUDA backend), in TFLOP/s and as a
// fraction of the H200's measured bf16 dense peak (790 TFLOP/s, docs/cuda.md): 8192^3 and the
// shapes of GPT-small's linear layers (M = tokens of a batch, K/N in {768, 2304, 3072}) in the three
// orientations of a Linear's forward, input gradient and weight gradient. Random data (never
// zeros: the tensor cores draw less power on zeros and run faster), 3 warm-up runs, then 5 rounds
// of 10 back-to-back products timed with CUDA events on the backend's stream (no host round trip
// between the products of a round); the median of the rounds' per-product times.
//
//   cuda_gemm_bench [--json] [--tokens M]
// Prints a table, or with --json one JSON object {"gpu_peak_tflops": 790, "records": [...]}; exits
// 0 with {"skipped": "<reason>"} where there is no GPU.
#include <algorithm>
#include <stdexcept>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/backend.h"
#include "mixtrain/cuda.h"
#include "mixtrain/mixtrain.h"
#if MIXTRAIN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "backends/cuda/cuda_backend.h"
#endif

namespace mt = mixtrain;

namespace {

constexpr double kPeakTflops = 790.0;

struct Record {
  std::string name, dtype;
  int64_t m, n, k;
  double ms, tflops;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Record time_gemm(const std::string& name, mt::DType dtype, int64_t m, int64_t n, int64_t k, bool a_t, bool b_t) {
  const mt::Device gpu(mt::kCUDA, 0);
  mt::Generator g(1);
  // a_t / b_t: the operand is stored transposed (a Linear's weight is [out, in] and is used as w^T).
  mt::Tensor a = a_t ? mt::randn({k, m}, {.dtype = dtype, .device = gpu}, &g).t()
                     : mt::randn({m, k}, {.dtype = dtype, .device = gpu}, &g);
  mt::Tensor b = b_t ? mt::randn({n, k}, {.dtype = dtype, .device = gpu}, &g).t()
                     : mt::randn({k, n}, {.dtype = dtype, .device = gpu}, &g);
  std::vector<double> ms;
#if MIXTRAIN_WITH_CUDA
  const cudaStream_t stream = mt::cuda::stream(gpu);
  cudaEvent_t start = nullptr, stop = nullptr;
  mt::cuda::check(cudaEventCreate(&start), "cudaEventCreate");
  mt::cuda::check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < 3; ++i) mt::matmul(a, b);
  constexpr int kRounds = 5, kPerRound = 10;
  for (int r = 0; r < kRounds; ++r) {
    mt::cuda::check(cudaEventRecord(start, stream), "cudaEventRecord");
    for (int i = 0; i < kPerRound; ++i) mt::matmul(a, b);  // results freed at once: the cache reuses them
    mt::cuda::check(cudaEventRecord(stop, stream), "cudaEventRecord");
    mt::cuda::check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float elapsed = 0;
    mt::cuda::check(cudaEventElapsedTime(&elapsed, start, stop), "cudaEventElapsedTime");
    ms.push_back(static_cast<double>(elapsed) / kPerRound);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
#else
  throw std::runtime_error("this build has no CUDA backend");
#endif
  const double t = median(ms);
  return {name, std::string(mt::to_string(dtype)), m, n, k, t, 2.0 * m * n * k / (t * 1e-3) / 1e12};
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  int64_t tokens = 8192;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json") {
      json = true;
    } else if (arg == "--tokens" && i + 1 < argc) {
      tokens = std::strtoll(argv[++i], nullptr, 10);
      if (tokens < 1 || tokens > (int64_t{1} << 20)) {
        std::fprintf(stderr, "cuda_gemm_bench: --tokens must be in [1, 2^20]\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: cuda_gemm_bench [--json] [--tokens M]\n");
      return 2;
    }
  }
  if (!mt::cuda::is_available()) {
    const std::string why = mt::cuda::unavailable_reason();
    if (json) std::printf("{\"skipped\": \"%s\"}\n", mt::detail::escape_untrusted(why).c_str());
    else std::printf("skipped: %s\n", why.c_str());
    return 0;
  }
  std::vector<Record> records;
  try {
    for (mt::DType dt : {mt::kBFloat16, mt::kFloat16, mt::kFloat32}) {
      records.push_back(time_gemm("8192^3", dt, 8192, 8192, 8192, false, false));
      // GPT-small's Linear layers: (in, out) pairs; forward x w^T, input grad g w, weight grad g^T x.
      const std::pair<int64_t, int64_t> layers[] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
      for (const auto& [in, out] : layers) {
        const std::string shape = std::to_string(in) + "->" + std::to_string(out);
        records.push_back(time_gemm("fwd " + shape, dt, tokens, out, in, false, true));
        records.push_back(time_gemm("dgrad " + shape, dt, tokens, in, out, false, false));
        records.push_back(time_gemm("wgrad " + shape, dt, out, in, tokens, true, false));
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_gemm_bench: %s\n", e.what());
    return 1;
  }
  if (json) {
    std::printf("{\"gpu_peak_tflops\": %.0f, \"tf32\": %s, \"records\": [", kPeakTflops,
                mt::cuda::allow_tf32() ? "true" : "false");
    for (size_t i = 0; i < records.size(); ++i) {
      const Record& r = records[i];
      std::printf("%s{\"name\": \"%s\", \"dtype\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"ms\": %.4f, "
                  "\"tflops\": %.1f, \"percent_of_peak\": %.1f}",
                  i ? ", " : "", r.name.c_str(), r.dtype.c_str(), static_cast<long long>(r.m),
                  static_cast<long long>(r.n), static_cast<long long>(r.k), r.ms, r.tflops, 100.0 * r.tflops / kPeakTflops);
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("%-22s %-9s %6s %6s %6s %9s %9s %7s\n", "gemm", "dtype", "M", "N", "K", "ms", "TFLOP/s", "%peak");
  for (const Record& r : records)
    std::printf("%-22s %-9s %6lld %6lld %6lld %9.4f %9.1f %6.1f%%\n", r.name.c_str(), r.dtype.c_str(),
                static_cast<long long>(r.m), static_cast<long long>(r.n), static_cast<long long>(r.k), r.ms, r.tflops,
                100.0 * r.tflops / kPeakTflops);
  return 0;
}
