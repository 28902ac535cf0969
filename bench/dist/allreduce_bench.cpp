// All-reduce bandwidth of the MPI process group (dist::world()) against message size: what DDP's
// gradient buckets get. For each size from 4 KiB to 64 MiB (powers of 4) it all-reduces a tensor
// (sum) --warmup times, then --reps timed times; each repetition starts after a barrier and its time
// is the slowest rank's (all_reduce_async + wait, so the hand-off to the communication thread is
// included). Reported: the median repetition, the algorithm bandwidth (bytes / time) and the bus
// bandwidth 2 (W-1)/W * bytes / time, the per-link figure NCCL's tests print, comparable across W.
// 16-bit dtypes include the widening to fp32 and the rounding back. --raw measures MPI_Allreduce
// called directly on the main thread instead (fp32 only, no dist::world()): the baseline that shows
// what the communication thread costs.
//
//   mpirun -np 2 allreduce_bench [--json] [--raw] [--dtype float32|bfloat16|float16] [--reps 20]
//                                [--warmup 3] [--min-bytes 4096] [--max-bytes 67108864]
// Prints a table on rank 0, or with --json one JSON object {"ranks": W, "dtype": ..., "records": [...]}.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <mpi.h>

#include "mixtrain/dist/process_group.h"
#include "mixtrain/factory.h"

namespace mt = mixtrain;
namespace dist = mixtrain::dist;

namespace {

struct Options {
  bool json = false;
  bool raw = false;
  mt::DType dtype = mt::kFloat32;
  int reps = 20;
  int warmup = 3;
  int64_t min_bytes = 4096;
  int64_t max_bytes = int64_t{64} << 20;
};

struct Record {
  int64_t bytes, elements;
  double median_us, min_us, algbw_gbs, busbw_gbs;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "allreduce_bench: %s\nusage: mpirun -np 2 allreduce_bench [--json] [--dtype float32|bfloat16|float16] "
               "[--reps N] [--warmup N] [--min-bytes B] [--max-bytes B]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--json") {
      o.json = true;
    } else if (a == "--raw") {
      o.raw = true;
    } else if (a == "--dtype") {
      const std::string d = value();
      if (d == "float32") o.dtype = mt::kFloat32;
      else if (d == "bfloat16") o.dtype = mt::kBFloat16;
      else if (d == "float16") o.dtype = mt::kFloat16;
      else usage("--dtype takes float32, bfloat16 or float16");
    } else if (a == "--reps") {
      o.reps = std::atoi(value().c_str());
    } else if (a == "--warmup") {
      o.warmup = std::atoi(value().c_str());
    } else if (a == "--min-bytes") {
      o.min_bytes = std::atoll(value().c_str());
    } else if (a == "--max-bytes") {
      o.max_bytes = std::atoll(value().c_str());
    } else {
      usage(("unknown argument " + a).c_str());
    }
  }
  if (o.raw && o.dtype != mt::kFloat32) usage("--raw measures float32 only (MPI has no 16-bit float type)");
  if (o.reps < 1 || o.warmup < 0 || o.min_bytes < 4 || o.max_bytes < o.min_bytes) usage("bad numbers");
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// How one repetition is run: through the process group, or with MPI called directly.
struct Runner {
  virtual ~Runner() = default;
  virtual int size() = 0;
  virtual void barrier() = 0;
  virtual void all_reduce(const mt::Tensor& t) = 0;
  virtual int64_t slowest(int64_t ns) = 0;  // the maximum over ranks
};

struct GroupRunner final : Runner {
  dist::ProcessGroup& pg = dist::world();
  int size() override { return pg.size(); }
  void barrier() override { pg.barrier(); }
  void all_reduce(const mt::Tensor& t) override { pg.all_reduce_async(t, dist::ReduceOp::kSum)->wait(); }
  int64_t slowest(int64_t ns) override {
    const std::vector<int64_t> all = pg.all_gather(ns);
    return *std::max_element(all.begin(), all.end());
  }
};

struct RawRunner final : Runner {
  int size() override {
    int w = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &w);
    return w;
  }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
  void all_reduce(const mt::Tensor& t) override {
    MPI_Allreduce(MPI_IN_PLACE, t.raw_data(), static_cast<int>(t.numel()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  int64_t slowest(int64_t ns) override {
    int64_t max = 0;
    MPI_Allreduce(&ns, &max, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    return max;
  }
};

Record measure(Runner& runner, const Options& o, int64_t bytes) {
  const int64_t n = bytes / static_cast<int64_t>(mt::element_size(o.dtype));
  // Every repetition starts from ones (copied in before the barrier), so sums stay finite in fp16.
  const mt::Tensor ones = mt::full({n}, 1.0, {.dtype = o.dtype});
  const mt::Tensor t = mt::empty({n}, {.dtype = o.dtype});
  std::vector<double> times;
  for (int rep = 0; rep < o.warmup + o.reps; ++rep) {
    std::memcpy(t.raw_data(), ones.raw_data(), t.nbytes());
    runner.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    runner.all_reduce(t);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    // The slowest rank's time is the collective's.
    const int64_t slowest = runner.slowest(static_cast<int64_t>(ns));
    if (rep >= o.warmup) times.push_back(static_cast<double>(slowest) / 1e3);
  }
  const double us = median(times);
  const double w = runner.size();
  const double actual = static_cast<double>(n) * static_cast<double>(mt::element_size(o.dtype));
  const double algbw = actual / (us * 1e-6) / 1e9;
  return {static_cast<int64_t>(actual), n, us, *std::min_element(times.begin(), times.end()), algbw,
          algbw * 2 * (w - 1) / w};
}

std::string human(int64_t bytes) {
  char s[32];
  if (bytes >= (int64_t{1} << 20))
    std::snprintf(s, sizeof s, "%lld MiB", static_cast<long long>(bytes >> 20));
  else
    std::snprintf(s, sizeof s, "%lld KiB", static_cast<long long>(bytes >> 10));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (!dist::launched_by_mpi()) {
    std::fprintf(stderr, "allreduce_bench: a single process has nothing to reduce with: run it under mpirun -np 2\n");
    return 2;
  }
  std::vector<Record> records;
  int rank = 0;
  int size = 0;
  std::string backend;
  if (o.raw) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    RawRunner runner;
    size = runner.size();
    backend = "raw MPI_Allreduce";
    for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) records.push_back(measure(runner, o, bytes));
    MPI_Finalize();
  } else {
    GroupRunner runner;
    rank = runner.pg.rank();
    size = runner.size();
    backend = runner.pg.backend_name();
    for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) records.push_back(measure(runner, o, bytes));
  }
  if (rank != 0) return 0;

  const std::string dtype(mt::to_string(o.dtype));
  if (o.json) {
    std::printf("{\"ranks\": %d, \"backend\": \"%s\", \"dtype\": \"%s\", \"op\": \"sum\", \"reps\": %d, \"records\": [",
                size, backend.c_str(), dtype.c_str(), o.reps);
    for (size_t i = 0; i < records.size(); ++i) {
      const Record& r = records[i];
      std::printf("%s{\"bytes\": %lld, \"elements\": %lld, \"median_us\": %.2f, \"min_us\": %.2f, "
                  "\"algbw_gbs\": %.4f, \"busbw_gbs\": %.4f}",
                  i ? ", " : "", static_cast<long long>(r.bytes), static_cast<long long>(r.elements), r.median_us,
                  r.min_us, r.algbw_gbs, r.busbw_gbs);
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("all_reduce sum of %s, %d ranks (%s), median of %d repetitions after %d warm-up\n\n", dtype.c_str(),
              size, backend.c_str(), o.reps, o.warmup);
  std::printf("| size | elements | median time | min time | algorithm bandwidth | bus bandwidth |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|\n");
  for (const Record& r : records) {
    std::printf("| %s | %lld | %.1f us | %.1f us | %.2f GB/s | %.2f GB/s |\n", human(r.bytes).c_str(),
                static_cast<long long>(r.elements), r.median_us, r.min_us, r.algbw_gbs, r.busbw_gbs);
  }
  return 0;
}
