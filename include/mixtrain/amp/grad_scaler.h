// mixtrain/amp/grad_scaler.h: dynamic loss scaling, PyTorch's torch.amp.GradScaler.
//
//   mt::amp::GradScaler scaler;                 // 65536, x2 every 2000 clean steps, x0.5 on inf/NaN
//   scaler.scale(loss).backward();              // gradients are scaled by S
//   scaler.unscale_(opt);                       // optional: to clip or inspect unscaled gradients
//   scaler.step(opt);                           // unscales (if not done) and skips opt.step() on inf/NaN
//   scaler.update();                            // once per iteration, after every step()
//
// State machine (exactly PyTorch's, reference amp-semantics.md section 3): the scale (0-dim fp32)
// and growth tracker (0-dim int32) are created lazily by the first scale(), on that tensor's device.
// Per optimizer, between two update()s: READY -> unscale_() -> UNSCALED -> step() -> STEPPED; calling
// unscale_() twice, unscale_() after step(), or step() twice throws mt::Error with PyTorch's message.
// unscale_() multiplies every gradient by the fp32 rounding of the fp64 reciprocal of the scale in
// one multi-tensor pass (16-bit gradients widened to fp32; strided gradients are fine) and records
// whether any value was inf/NaN; all values are multiplied even then. update() backs off once per
// iteration if any optimizer saw inf/NaN, else counts a clean step and grows the scale after
// growth_interval of them (never to inf); the per-optimizer state is then reset.
//
// fp16 gradients: unscale_() refuses them ("Attempting to unscale FP16 gradients."), because
// unscaling in fp16 flushes small gradients to zero. Train fp16 parameters with fp32 master weights
// instead: an optimizer holding 16-bit parameters reports supports_fused_unscale(), and step() then
// only checks the gradients and hands the inverse scale to the optimizer, which unscales in fp32 as
// it reads each gradient (PyTorch's _step_supports_amp_scaling path). bf16 gradients are accepted
// everywhere (bf16 normally needs no loss scaling at all, but scaling it is harmless).
//
// Disabled (enabled = false): every call is a pass-through: scale() returns its argument, step()
// calls opt.step() and returns true, get_scale() is 1, state_dict() is empty.
//
// Extensions, all off by default so that the default behaviour is PyTorch's: min/max clamps on the
// scale, allow_fp16_unscale, skip counters (always maintained, never change behaviour) and the
// scale-collapse diagnostic.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "mixtrain/optim/optimizer.h"
#include "mixtrain/tensor.h"

namespace mixtrain::amp {

enum class CollapseAction { kThrow, kWarn };

// Reports a collapsing loss scale: the usual sign of a model whose forward pass overflows fp16 (a NaN
// loss is not cured by scaling) or of a divergent learning rate. Checked in update().
struct CollapseDiagnostic {
  int64_t max_consecutive_skips = 0;               // > 0: trigger after this many iterations in a row with inf/NaN
  double scale_below = 0.0;                        // > 0: trigger when the scale falls below this value
  CollapseAction action = CollapseAction::kThrow;  // kThrow: mt::Error from update(); kWarn: call `warn`
  // Receives the message for kWarn, once per run of bad iterations; default: one line on stderr.
  std::function<void(const std::string&)> warn;
};

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;   // must be > 1
  double backoff_factor = 0.5;  // must be < 1
  int64_t growth_interval = 2000;
  bool enabled = true;

  // Extensions (off by default).
  std::optional<double> min_scale;  // the automatic update never goes below / above these
  std::optional<double> max_scale;
  bool allow_fp16_unscale = false;  // let unscale_() unscale fp16 gradients in place
  CollapseDiagnostic collapse = {};
  // The reduction point of data parallelism: called with an optimizer's 0-dim fp32 found_inf right
  // after the local inf/NaN check and before step() decides to skip. A process group makes it the
  // maximum over every process (in place), so that an inf on one process skips the step everywhere
  // and every process keeps the same scale.
  std::function<void(const Tensor& found_inf)> reduce_found_inf;
};

// PyTorch's five keys: "scale", "growth_factor", "backoff_factor", "growth_interval",
// "_growth_tracker"; all values are numbers (the interval and tracker are integers). Empty when
// the scaler is disabled. A std::map so that a checkpoint writer can store it as is.
using GradScalerStateDict = std::map<std::string, double>;

class GradScaler {
 public:
  explicit GradScaler(const GradScalerOptions& options = {});

  // outputs * scale, recorded by autograd (out of place). An fp32 (or 0-dim) output gives an fp32
  // product; a 16-bit output with dims keeps its dtype, the product formed in fp32 (PyTorch's rule
  // that a 0-dim fp32 scale does not promote a 16-bit tensor).
  Tensor scale(const Tensor& outputs);
  std::vector<Tensor> scale(const std::vector<Tensor>& outputs);

  // Divides the optimizer's gradients by the scale in place (see above). At most once per optimizer
  // per iteration, before step().
  void unscale_(optim::Optimizer& optimizer);

  // Unscales if unscale_() was not called, then runs optimizer.step() unless a gradient was inf/NaN.
  // Returns whether the optimizer stepped.
  bool step(optim::Optimizer& optimizer);

  // Updates the scale (growth-tracker rule) and resets the per-optimizer state. With new_scale the
  // scale is set to it (as fp32) and the growth tracker is left alone. Call once per iteration.
  void update();
  void update(double new_scale);
  void update(const Tensor& new_scale);  // one-element float32, requires_grad false; copied

  double get_scale() const;  // 1 when disabled; the initial scale before the first scale()
  double get_growth_factor() const { return growth_factor_; }
  void set_growth_factor(double v) { growth_factor_ = v; }  // setters validate nothing (PyTorch)
  double get_backoff_factor() const { return backoff_factor_; }
  void set_backoff_factor(double v) { backoff_factor_ = v; }
  // Note: growth happens when the tracker *equals* the interval; lowering the interval below the
  // current tracker postpones growth until an inf resets the tracker (PyTorch's quirk, kept).
  int64_t get_growth_interval() const { return growth_interval_; }
  void set_growth_interval(int64_t v) { growth_interval_ = v; }
  int64_t get_growth_tracker() const;  // 0 when disabled
  bool is_enabled() const { return enabled_; }

  GradScalerStateDict state_dict() const;
  // No-op when disabled; an empty dict throws PyTorch's message; a missing key throws naming it.
  void load_state_dict(const GradScalerStateDict& state_dict);

  // The scale tensor (0-dim fp32; undefined before the first scale()).
  const Tensor& scale_tensor() const { return scale_; }

  // Extensions: counters (maintained always; they never change behaviour).
  bool last_step_skipped() const { return last_step_skipped_; }
  int64_t total_skipped_steps() const { return total_skipped_steps_; }  // step() calls that skipped
  // update()s in a row whose iteration saw an inf/NaN gradient (reset by a clean one).
  int64_t consecutive_skipped_iterations() const { return consecutive_skipped_; }
  // Name of the first parameter with a non-finite gradient in the most recent skipped step (the
  // optimizer's names from NamedParameter, else "param_groups[g].params[i]"); empty if none yet.
  const std::string& last_nonfinite_param() const { return last_nonfinite_param_; }

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  // A value of a 0-dim device tensor known on the host, valid while the tensor is the same storage
  // at the version it was read or computed at (every in-place write bumps the version). Each read is
  // a host wait on a GPU; the scaler reads each value at most once per change.
  struct HostValue {
    float value = 0;
    const void* storage = nullptr;
    uint64_t version = 0;
    bool known = false;
    float get(const Tensor& t);
    void set(const Tensor& t, float v) { value = v, storage = t.raw_data(), version = t.version(), known = true; }
  };
  struct OptimizerState {
    Stage stage = Stage::kReady;
    Tensor found_inf;              // 0-dim fp32; undefined until an inf check ran
    HostValue found_inf_host;      // found_inf's value, known without a read when no reduction ran
    int64_t first_nonfinite = -1;  // flat parameter index
  };

  void check_scale(const char* method) const;
  float inv_scale() const;
  // Runs the check (and unscale unless inv_scale is 1) over the optimizer's gradients.
  void unscale_grads(optim::Optimizer& optimizer, OptimizerState& state, float inv, bool allow_fp16);
  void finish_update(bool found_inf);
  void check_collapse();

  bool enabled_;
  double init_scale_;
  double growth_factor_, backoff_factor_;
  int64_t growth_interval_;
  int64_t init_growth_tracker_ = 0;
  GradScalerOptions options_;
  Tensor scale_;           // 0-dim fp32, lazily created
  mutable HostValue scale_host_;
  Tensor growth_tracker_;  // 0-dim int32, lazily created
  std::unordered_map<const optim::Optimizer*, OptimizerState> per_optimizer_;

  bool last_step_skipped_ = false;
  int64_t total_skipped_steps_ = 0;
  int64_t consecutive_skipped_ = 0;
  bool collapse_warned_ = false;
  std::string last_nonfinite_param_;
};

}  // namespace mixtrain::amp
