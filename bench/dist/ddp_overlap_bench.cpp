// How much gradient communication DistributedDataParallel hides behind backward.
//
//   mpirun -np 2 mixtrain_ddp_overlap_bench [--json] [--bucket-mb X] [--steps N] [--batch B]
//
// A 4-layer MLP (784 -> 2048 -> 2048 -> 2048 -> 10, 12.6M parameters, 50 MB of fp32 gradients) trains
// with AdamW on random data, B samples per rank, N timed steps after 3 warm-up ones, twice:
//   overlap  buckets all-reduced as backward produces them (the default);
//   at end   every bucket all-reduced after backward (DdpOptions::overlap = false);
// and the same buckets are all-reduced alone (no compute) to time the communication itself.
// Reported per step (medians): step time of each mode, the communication alone, the time backward's
// end waited for reductions in each mode (which includes waiting for the slower rank), and
// hidden = 1 - wait(overlap) / wait(at end): the part of the end-of-backward wait the overlap removes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mixtrain/dist/ddp.h"
#include "mixtrain/dist/process_group.h"
#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
namespace dist = mixtrain::dist;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

struct Result {
  double step_ms = 0, wait_ms = 0;
  int64_t buckets = 0;
};

Result run(dist::ProcessGroup& g, bool overlap, double bucket_mb, int steps, int64_t batch) {
  mt::manual_seed(1);
  mt::nn::Sequential model(mt::nn::Linear(784, 2048), mt::nn::ReLU(), mt::nn::Linear(2048, 2048), mt::nn::ReLU(),
                           mt::nn::Linear(2048, 2048), mt::nn::ReLU(), mt::nn::Linear(2048, 10));
  dist::DistributedDataParallel ddp(model, g, {.bucket_cap_mb = bucket_mb, .overlap = overlap});
  mt::optim::AdamW opt(model.parameters(), {.lr = 1e-4});
  mt::Generator gen(10 + g.rank());
  const mt::Tensor x = mt::randn({batch, 784}, {}, &gen);
  const mt::Tensor y = mt::randint(0, 10, {batch}, {.dtype = mt::kInt64}, &gen);
  std::vector<double> step_ms, wait_ms;
  for (int s = 0; s < steps + 3; ++s) {
    g.barrier();  // every rank starts the step together: the times are the job's
    const double waited_before = ddp.stats().wait_ms;
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    F::cross_entropy(model(x), y).backward();
    ddp.finish_gradient_sync();
    opt.step();
    if (s >= 3) {
      step_ms.push_back(ms_since(t0));
      wait_ms.push_back(ddp.stats().wait_ms - waited_before);
    }
  }
  return {median(step_ms), median(wait_ms), static_cast<int64_t>(ddp.bucket_assignment().size())};
}

// The same buckets all-reduced back to back with nothing else running.
double communication_ms(dist::ProcessGroup& g, double bucket_mb, int steps) {
  const int64_t total = 784 * 2048 + 2048 + 2 * (2048 * 2048 + 2048) + 2048 * 10 + 10;
  const auto per_bucket = std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * 1024 * 1024 / 4));
  std::vector<mt::Tensor> buckets;
  for (int64_t done = 0; done < total; done += per_bucket)
    buckets.push_back(mt::ones({std::min(per_bucket, total - done)}));
  std::vector<double> ms;
  for (int s = 0; s < steps + 3; ++s) {
    g.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::shared_ptr<dist::Work>> work;
    for (const mt::Tensor& b : buckets) work.push_back(g.all_reduce_async(b));
    for (auto& w : work) w->wait();
    if (s >= 3) ms.push_back(ms_since(t0));
  }
  return median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  double bucket_mb = 25.0;
  int steps = 10;
  int64_t batch = 64;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") json = true;
    else if (a == "--bucket-mb" && i + 1 < argc) bucket_mb = std::atof(argv[++i]);
    else if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--batch" && i + 1 < argc) batch = std::atoll(argv[++i]);
    else {
      std::fprintf(stderr, "usage: mpirun -np N mixtrain_ddp_overlap_bench [--json] [--bucket-mb X] [--steps N] [--batch B]\n");
      return 2;
    }
  }
  if (!(bucket_mb > 0) || steps < 1 || steps > 100000 || batch < 1 || batch > 65536) {
    std::fprintf(stderr, "mixtrain_ddp_overlap_bench: bad --bucket-mb, --steps or --batch\n");
    return 2;
  }
  try {
    dist::ProcessGroup& g = dist::world();
    const Result with = run(g, true, bucket_mb, steps, batch);
    const Result without = run(g, false, bucket_mb, steps, batch);
    const double comm = communication_ms(g, bucket_mb, steps);
    const double hidden = without.wait_ms > 0 ? std::clamp(1.0 - with.wait_ms / without.wait_ms, 0.0, 1.0) : 0.0;
    if (g.rank() != 0) return 0;
    if (json) {
      std::printf("{\"world_size\": %d, \"threads\": %d, \"batch_per_rank\": %lld, \"bucket_mb\": %g, \"buckets\": %lld, "
                  "\"step_ms_overlap\": %.3f, \"step_ms_at_end\": %.3f, \"comm_ms\": %.3f, \"wait_ms_overlap\": %.3f, "
                  "\"wait_ms_at_end\": %.3f, \"hidden_fraction\": %.3f}\n",
                  g.size(), mt::get_num_threads(), static_cast<long long>(batch), bucket_mb,
                  static_cast<long long>(with.buckets), with.step_ms, without.step_ms, comm, with.wait_ms,
                  without.wait_ms, hidden);
    } else {
      std::printf("%d processes x %d threads, batch %lld per rank, %lld buckets of <= %g MiB\n", g.size(),
                  mt::get_num_threads(), static_cast<long long>(batch), static_cast<long long>(with.buckets), bucket_mb);
      std::printf("  step, overlapped      %8.2f ms (waited %.2f ms for reductions)\n", with.step_ms, with.wait_ms);
      std::printf("  step, reduce at end   %8.2f ms (waited %.2f ms)\n", without.step_ms, without.wait_ms);
      std::printf("  communication alone   %8.2f ms\n", comm);
      std::printf("  end-of-backward wait removed by the overlap %5.0f%%\n", 100 * hidden);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixtrain_ddp_overlap_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
