// mixtrain/nn/numerics_monitor.h: what the numbers of a run look like, and which formats can hold them.
//
// While a NumericsMonitor lives, on the steps it samples (every `every`-th), it reads the outputs of
// every recorded op after its forward (activations), the gradients every backward node returns, and,
// when record_parameters() is called after backward, every parameter and its gradient. Per tensor
// site (module path + op, or parameter name) it accumulates over the sampled steps:
//   amax, the smallest non-zero magnitude, the fraction of zeros and of non-finite values;
//   for fp16, bf16, FP8 E4M3 and E5M2: the fraction of non-zero values that would flush to zero, land
//   in the subnormal range, or overflow when cast as they are; for the FP8 formats also the fraction
//   that flushes to zero after per-tensor scaling of amax to the format's maximum (how FP8 training
//   casts, nn/fp8 and Transformer Engine's recipe);
//   the mean relative rounding error of a cast to bf16 and to fp16 (over finite non-zero values).
// report_markdown() turns them into tables with a recommendation per site (safe in fp16 without
// loss scaling; fp16 only with loss scaling; keep in bf16/fp32 because fp16 overflows), and
// write_report(dir) writes report.md plus numerics.dat for plotting (the CLI's --numerics-report runs
// gnuplot on it).
//
// Cost: nothing on steps not sampled (one flag read per op); a sampled step copies every observed
// tensor to the host in fp32 and scans it once. Off unless constructed. Sites are keyed by module
// path and op name, so repeated calls of an op in one module (e.g. two adds) share a site.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mixtrain/nn/module.h"

namespace mixtrain::nn {

// The statistics of one tensor site over the sampled steps.
struct TensorNumerics {
  enum Format { kFp16, kBf16, kE4M3, kE5M2, kNumFormats };
  static const char* format_name(int f);  // "fp16", "bf16", "e4m3", "e5m2"

  int64_t samples = 0;   // tensors seen
  int64_t elements = 0;  // elements seen
  int64_t zeros = 0, nonfinite = 0;
  double amax = 0;                // largest finite magnitude
  double amin_nonzero = 0;        // smallest non-zero finite magnitude (0 when none)
  int64_t flush[kNumFormats] = {};      // non-zero values that round to zero when cast as they are
  int64_t subnormal[kNumFormats] = {};  // values that land in the format's subnormal range
  int64_t overflow[kNumFormats] = {};   // finite values that round past the format's largest finite value
  int64_t scaled_flush[kNumFormats] = {};  // FP8 only: flush to zero after scaling amax to the maximum
  // bf16, fp16: sum and count of |x - cast(x)| / |x| over finite non-zero x (fp16: those it does not
  // overflow on).
  double rel_error_sum[2] = {};
  int64_t rel_error_count[2] = {};

  void add(const float* x, int64_t n);  // one tensor's values
  int64_t nonzero_finite() const { return elements - zeros - nonfinite; }
  double fraction(int64_t count) const;  // of the non-zero finite elements
  double mean_rel_error(int f) const;    // f = kBf16 or kFp16 (0 when no value)
  // "no data"; "bf16/fp32 (fp16 overflows)"; when more than 0.1% would flush to zero or more than 1%
  // would be subnormal in fp16: "fp16 with loss scaling" for a gradient (scaling moves it up), "bf16/fp32
  // (too small for fp16)" otherwise; else "fp16 ok".
  std::string recommendation(bool gradient = true) const;
};

struct NumericsOptions {
  int64_t every = 100;  // sample steps 1, 1 + every, 1 + 2 * every, ... (the first step always)
};

class NumericsMonitor {
 public:
  // Sets `model`'s module scope names and starts observing ops (on sampled steps only).
  NumericsMonitor(Module& model, NumericsOptions options = {});
  // Without a model: ops only (named by whatever scopes are active), and parameters passed to
  // record_parameter().
  explicit NumericsMonitor(NumericsOptions options);
  ~NumericsMonitor();
  NumericsMonitor(const NumericsMonitor&) = delete;
  NumericsMonitor& operator=(const NumericsMonitor&) = delete;

  // Starts step `step` (1-based); returns whether it is sampled. `loss_scale` (a GradScaler's scale,
  // 1 without one) is what the gradients of the step are multiplied by; the report states its range.
  bool begin_step(int64_t step, double loss_scale = 1.0);
  bool sampling() const;
  // After backward on a sampled step: every parameter and its gradient (as they are: still scaled by
  // a GradScaler's loss scale, which is what an fp16 gradient holds). No-op when not sampling.
  void record_parameters();
  // The same for one parameter outside a module: sites "param <name>" and "grad <name>".
  void record_parameter(const std::string& name, const Tensor& param);
  void end_step();

  // Site key -> statistics. Keys: "forward <module path>/<op>", "backward <module path>/<op>",
  // "param <name>", "grad <name>" (module path "" is written as "-").
  std::map<std::string, TensorNumerics> sites() const;
  int64_t sampled_steps() const;
  // The report as markdown (title, sampled steps, the tables, the recommendations).
  std::string report_markdown(const std::string& title) const;
  // Writes dir/report.md and dir/numerics.dat (one row per site: index, amax, amin_nonzero, kind, key).
  void write_report(const std::string& dir, const std::string& title) const;

 private:
  struct State;
  Module* model_ = nullptr;
  std::shared_ptr<State> state_;
  int64_t every_ = 1;
  uint64_t observer_id_ = 0;
};

}  // namespace mixtrain::nn
