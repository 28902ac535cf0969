// mixtrain bench: training-step throughput of a named model on synthetic data.
#include <unistd.h>

#include <cstdio>
#include <iterator>
#include <map>
#include <sstream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "run_setup.h"
#include "mixtrain/dist/process_group.h"
#include "mixtrain/memory.h"
#include "mixtrain/nn/checkpoint.h"
#include "wait_policy.h"

namespace mixtrain::cli {

namespace {

struct BenchArgs {
  RunArgs run;
  int64_t warmup = 5;
  bool json = false;
  bool memory = false;       // --memory: the breakdown at the peak
  double max_batch_gib = 0;  // --max-batch GIB (0: time steps at --batch-size)
};

// Synthetic data: random images or random tokens, exactly enough for one pass.
DataSpec bench_data(const BenchArgs& b) {
  DataSpec spec;
  spec.kind = DataSpec::Kind::kSynthetic;
  spec.synthetic_size = b.run.trainer.batch_size * (b.warmup + b.run.trainer.max_steps);
  return spec;
}

CLI::App* add_bench_flags(CLI::App& app, BenchArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "bench", "Time training steps on synthetic data: step time, samples/s, GFLOP/s and peak memory");
  args.run.trainer.max_steps = 20;
  add_run_flags(*cmd, args.run, Flags::kModel | Flags::kPrecision | Flags::kCommon);
  cmd->add_option("--master-weights", args.run.master_weights, "Parameter dtype: fp32, or bf16/fp16 (= --precision)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_option("--steps", args.run.trainer.max_steps, "Timed steps")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--warmup", args.warmup, "Untimed steps first (optimizer state, caches)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--embed", args.run.embed,
                  "gpt only: embedding width C, a multiple of the 4 heads (default 256), for scaling studies")
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 16));
  cmd->add_flag("--json", args.json, "Print one JSON object instead of text (with the memory breakdown as peak_breakdown)");
  cmd->add_flag("--memory", args.memory,
                "Also print what the bytes at the training peak were for: parameters, master weights, gradients, "
                "optimizer state, saved activations, gradients in flight, the running op's temporaries, the rest, "
                "and the allocator's cache; with the op, module and phase (forward, backward, optimizer step) "
                "running then");
  cmd->add_option("--max-batch", args.max_batch_gib,
                  "Instead of timing: find the largest batch whose training peak (tensor bytes, as peak_bytes) "
                  "stays within GIB gibibytes, measuring two real steps (one warm-up, one timed) per candidate "
                  "batch; --batch-size, --steps and --warmup are not used")
      ->check(CLI::Range(1.0 / 1024, 1048576.0));
  return cmd;
}

// What bench checks before anything runs: the flags as for a run on its synthetic data.
void check_bench(const BenchArgs& b) {
  if (!b.run.tokenizer.empty())
    throw UsageError("--tokenizer: bench times steps on random tokens, it reads no text");
  if (b.max_batch_gib > 0 && dist::launched_by_mpi())
    throw UsageError("--max-batch searches in one process: run it without mpirun (the batch is per process)");
  check_combination(b.run, bench_data(b), train::parse_precision(b.run.precision));
}

// One bench run (the flags' batch, warm-up and timed steps): the trainer's summary, and the
// allocator's and host waits' counts over the timed steps.
struct Measured {
  train::TrainSummary summary;
  double allocations_per_step = 0;
  double system_allocations_per_step = 0;
  nlohmann::json syncs;
};

Measured measure(const BenchArgs& b, const ModelInfo& info, Device device) {
  RunArgs a = b.run;
  const train::Precision precision = train::parse_precision(a.precision);
  LoadedData data = load_data(bench_data(b), a, info, /*codec=*/nullptr);

  std::shared_ptr<nn::Module> model = make_run_model(a);
  if (a.checkpoint_activations) nn::set_activation_checkpointing(*model, true);
  model->to(device);
  train::TrainerOptions o = trainer_options(a, precision, train::parse_param_dtype(a.master_weights));
  if (dist::launched_by_mpi()) o.process_group = &dist::world();  // data parallel: samples_per_sec of the job
  o.flops_per_sample = info.flops_per_sample;
  o.max_steps = b.warmup + a.trainer.max_steps;
  o.timing_warmup_steps = b.warmup;
  o.out_dir.clear();
  o.eval_every_epoch = false;
  // Full batches only: the synthetic text holds a few windows more than the timed steps use, and the
  // prefetch thread would otherwise build that partial last batch during the timed steps, which
  // shows up as allocations of sizes no training step uses.
  o.drop_last = true;
  // Allocator counters over the timed steps: snapshots after the last warm-up step and the last step.
  // Host waits on the device (mixtrain/device.h) over the same steps.
  memory::Stats at_timing_start = memory::stats(device), at_end = memory::stats(device);
  SyncCounts syncs_at_start = sync_counts(device), syncs_at_end = sync_counts(device);
  o.on_step = [&, warmup = b.warmup, last = b.warmup + a.trainer.max_steps](const train::StepInfo& i) {
    if (i.step == warmup) {
      at_timing_start = memory::stats(device);
      syncs_at_start = sync_counts(device);
    }
    if (i.step == last) {
      at_end = memory::stats(device);
      syncs_at_end = sync_counts(device);
    }
  };
  train::Trainer trainer(*model, train::adamw(a.lr, a.weight_decay), *data.train, /*eval_data=*/nullptr, o);
  Measured m;
  m.summary = trainer.fit();
  const double steps = static_cast<double>(a.trainer.max_steps);
  m.allocations_per_step = static_cast<double>(at_end.allocations - at_timing_start.allocations) / steps;
  m.system_allocations_per_step =
      static_cast<double>(at_end.system_allocations - at_timing_start.system_allocations) / steps;
  auto per_step = [&](int64_t SyncCounts::*field) {
    return static_cast<double>(syncs_at_end.*field - syncs_at_start.*field) / steps;
  };
  m.syncs = {{"to_host", per_step(&SyncCounts::to_host)},
             {"from_host", per_step(&SyncCounts::from_host)},
             {"synchronize", per_step(&SyncCounts::synchronize)},
             {"kernel_results", per_step(&SyncCounts::kernel_results)},
             {"total", static_cast<double>(syncs_at_end.total() - syncs_at_start.total()) / steps}};
  return m;
}

// --max-batch GIB: the largest batch whose training peak (tensor bytes, the second step's: the
// optimizer state exists by then) stays within the budget, each candidate measured by real steps.
// The peak grows by the same bytes per example, so after two measurements the next candidate is
// the line through them; doubling and bisection bound it and confirm the answer (a fitting batch
// and the next one measured over the budget).
int run_max_batch(const BenchArgs& b, const ModelInfo& info, Device device) {
  const int64_t budget = static_cast<int64_t>(b.max_batch_gib * static_cast<double>(int64_t{1} << 30));
  if (device.is_cpu()) {
    // The candidates really run: a budget near the machine's memory would have the system kill the
    // search (the process holds more than its tensors: code, the allocator's cache, the data).
    const double physical = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
    if (physical > 0 && static_cast<double>(budget) > 0.9 * physical) {
      throw UsageError(detail::concat("--max-batch ", b.max_batch_gib, " GiB is more than 90% of this machine's ",
                                      human_bytes(physical), " of memory: the batches near the budget would not fit in it"));
    }
  }
  BenchArgs probe_args = b;
  probe_args.warmup = 1;
  probe_args.run.trainer.max_steps = 1;
  nlohmann::json probes = nlohmann::json::array();
  std::map<int64_t, int64_t> peak;  // batch -> measured peak bytes
  auto probe = [&](int64_t batch) {
    probe_args.run.trainer.batch_size = batch;
    const int64_t bytes = measure(probe_args, info, device).summary.peak_bytes;
    // The candidate's tensors are free now but cached in blocks of its sizes, which the next
    // candidate's sizes mostly miss: handed back, so that the process holds one candidate at a time
    // (kept, the cache of a batch near the budget plus the next candidate outgrew a 24 GiB machine).
    memory::empty_cache(device);
    peak[batch] = bytes;
    probes.push_back({{"batch_size", batch}, {"peak_bytes", bytes}, {"fits", bytes <= budget}});
    if (!b.json) {
      std::printf("  batch %-6lld peak %s: %s\n", static_cast<long long>(batch), human_bytes(static_cast<double>(bytes)).c_str(),
                  bytes <= budget ? "fits" : "over the budget");
      std::fflush(stdout);
    }
    return bytes <= budget;
  };
  if (!b.json) {
    std::printf("bench --max-batch: %s, %s, the largest batch whose training peak fits in %s (2 steps per batch)\n",
                b.run.model.c_str(), b.run.precision.c_str(), human_bytes(static_cast<double>(budget)).c_str());
  }
  constexpr int64_t kLimit = int64_t{1} << 24;
  int64_t lo = 0, hi = 0;  // the largest batch measured to fit (0: none), the smallest measured not to (0: none)
  for (int64_t next = 1;;) {
    (probe(next) ? lo : hi) = next;
    if (lo == 0 || (hi != 0 && hi == lo + 1)) break;  // batch 1 does not fit, or the answer is bracketed
    MT_CHECK(lo < kLimit, "bench --max-batch: batch ", lo, " still fits in ", b.max_batch_gib,
             " GiB; the search stops there");
    next = hi == 0 ? 2 * lo : lo + (hi - lo) / 2;  // doubling, then bisection
    if (peak.size() >= 2) {
      // The line through the two largest measured batches: the last batch it says fits, kept inside
      // the bracket (so that a prediction that is right is confirmed by measuring the next batch).
      const auto last = std::prev(peak.end()), before = std::prev(last);
      const double per_example =
          static_cast<double>(last->second - before->second) / static_cast<double>(last->first - before->first);
      if (per_example > 0) {
        const double predicted =
            static_cast<double>(before->first) + static_cast<double>(budget - before->second) / per_example;
        next = std::max(lo + 1, static_cast<int64_t>(std::min(predicted, static_cast<double>(kLimit))));
        if (hi != 0) next = std::min(next, hi - 1);
      }
    }
  }
  if (lo == 0) {
    throw UsageError(detail::concat("--max-batch ", b.max_batch_gib, ": batch 1 already needs ",
                                    human_bytes(static_cast<double>(peak[1])), " of tensor memory"));
  }
  if (b.json) {
    std::printf("%s\n", nlohmann::json({{"model", b.run.model},
                                         {"precision", b.run.precision},
                                         {"master_weights", b.run.master_weights},
                                         {"checkpoint_activations", b.run.checkpoint_activations},
                                         {"budget_bytes", budget},
                                         {"max_batch_size", lo},
                                         {"peak_bytes", peak[lo]},
                                         {"next_peak_bytes", peak[hi]},
                                         {"probes", probes}})
                             .dump()
                             .c_str());
  } else {
    std::printf("largest batch: %lld (peak %s, %lld bytes of the budget's %lld); batch %lld needs %lld bytes\n",
                static_cast<long long>(lo), human_bytes(static_cast<double>(peak[lo])).c_str(),
                static_cast<long long>(peak[lo]), static_cast<long long>(budget), static_cast<long long>(hi),
                static_cast<long long>(peak[hi]));
  }
  return 0;
}

int run_bench(const BenchArgs& b) {
  const RunArgs& a = b.run;
  check_bench(b);
  const int threads = apply_threads(a.threads);
  const Device device = parse_device(a.device);
  const ModelInfo info = run_model_info(a);
  if (b.max_batch_gib > 0) return run_max_batch(b, info, device);
  const Measured m = measure(b, info, device);
  const train::TrainSummary& s = m.summary;
  const double allocations_per_step = m.allocations_per_step;
  const double system_allocations_per_step = m.system_allocations_per_step;
  const nlohmann::json& syncs = m.syncs;

  if (b.json) {
    std::ostringstream device_name;
    device_name << device;
    const nlohmann::json j = {{"model", a.model},
                              {"device", device_name.str()},
                              {"precision", a.precision},
                              {"scaler", s.scaler},
                              {"master_weights", s.master_weights},
                              {"embed", find_model(a.model).embed_dim(a)},
                              {"parameters", info.num_parameters},
                              {"batch_size", a.trainer.batch_size},
                              {"world_size", s.world_size},
                              {"global_batch_size", s.global_batch_size},
                              {"steps", a.trainer.max_steps},
                              {"warmup", b.warmup},
                              {"threads", threads},
                              {"omp_wait_policy", wait_policy()},
                              {"cpu", s.cpu},
                              {"isa", s.isa},
                              {"products", s.products},
                              {"step_ms_median", s.step_ms_median},
                              {"samples_per_sec", s.samples_per_sec},
                              {"gflops", s.gflops.value_or(0.0)},
                              {"peak_bytes", s.peak_bytes},
                              {"compact_state", s.compact_state},
                              {"weight_update", s.weight_update},
                              {"checkpoint_activations", a.checkpoint_activations},
                              {"fused_lm_head", s.fused_lm_head},
                              {"find_nonfinite_origin", a.trainer.find_nonfinite_origin},
                              {"peak_breakdown", nlohmann::json::parse(s.to_json(-1))["peak_breakdown"]},
                              {"model_state_bytes", s.model_state_bytes},
                              {"model_state_bytes_per_param", s.model_state_bytes_per_param},
                              {"allocations_per_step", allocations_per_step},
                              {"system_allocations_per_step", system_allocations_per_step},
                              {"host_waits_per_step", syncs}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("bench: %s, %s (scaler %s, %s parameters), batch %lld, %lld timed steps after %lld warm-up, %d threads\n",
              a.model.c_str(), a.precision.c_str(), s.scaler ? "on" : "off", s.master_weights.c_str(),
              static_cast<long long>(a.trainer.batch_size), static_cast<long long>(a.trainer.max_steps), static_cast<long long>(b.warmup),
              threads);
  std::printf("  cpu          %s\n", cpu::describe().c_str());
  std::printf("  omp waiting  %s\n", wait_policy().c_str());
  std::printf("  products     %s\n", s.products.c_str());
  if (a.checkpoint_activations) std::printf("  activations  checkpointed (recomputed during backward)\n");
  if (s.fused_lm_head) std::printf("  head         fused with the loss (blocks of rows; --unfused-head: whole logits)\n");
  std::printf("  step time    %.3f ms (median)\n", s.step_ms_median);
  std::printf("  throughput   %.0f samples/s\n", s.samples_per_sec);
  std::printf("  compute      %.1f GFLOP/s (%lld training FLOPs per sample)\n", s.gflops.value_or(0.0),
              static_cast<long long>(info.flops_per_sample));
  std::printf("  peak memory  %s (%lld bytes)\n", human_bytes(static_cast<double>(s.peak_bytes)).c_str(),
              static_cast<long long>(s.peak_bytes));
  std::printf("  model state  %s, %.2f bytes per parameter (weights, gradients, masters, optimizer state%s)\n",
              human_bytes(static_cast<double>(s.model_state_bytes)).c_str(), s.model_state_bytes_per_param,
              s.compact_state                  ? "; compact"
              : s.weight_update != "master" ? ("; " + s.weight_update + " bf16 updates").c_str()
                                            : "");
  std::printf("  allocations  %.1f per step (%.2f from the system allocator)\n", allocations_per_step,
              system_allocations_per_step);
  if (b.memory) {
    std::istringstream table(text_table(breakdown_cells({{a.precision, s.peak_breakdown}})));
    for (std::string line; std::getline(table, line);) std::printf("  %s\n", line.c_str());
  }
  if (!device.is_cpu())
    std::printf("  host waits   %.1f per step (%.1f copies to the host, %.1f from it, %.1f kernel results, %.1f "
                "synchronisations)\n",
                syncs["total"].get<double>(), syncs["to_host"].get<double>(), syncs["from_host"].get<double>(),
                syncs["kernel_results"].get<double>(), syncs["synchronize"].get<double>());
  return 0;
}

class BenchCommand final : public Command {
 public:
  CLI::App* add(CLI::App& app) override { return add_bench_flags(app, args_); }
  void check() const override { check_bench(args_); }
  int run() override { return run_bench(args_); }

 private:
  BenchArgs args_;
};

}  // namespace

std::unique_ptr<Command> make_bench_command() { return std::make_unique<BenchCommand>(); }

}  // namespace mixtrain::cli
