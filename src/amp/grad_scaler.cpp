// GradScaler: PyTorch's state machine over its two ops (scaler_ops.h). Error messages are
// PyTorch's wording so that users can search for them.
#include "mixtrain/amp/grad_scaler.h"

#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>

#include "amp/scaler_ops.h"
#include "mixtrain/autograd.h"
#include "mixtrain/factory.h"
#include "mixtrain/ops/elementwise.h"

namespace mixtrain::amp {
namespace {

constexpr const char* kFp16Hint =
    " (mixtrain: unscaling fp16 gradients in place would flush small values to zero. The supported way to "
    "train fp16 parameters is the optimizer's master-weight mode: keep the default .master_weights = true and call "
    "scaler.step(optimizer) without unscale_(); the optimizer then unscales each gradient in fp32 inside its "
    "update. To clip gradients, clip the scaled ones at max_norm * scaler.get_scale(), or set "
    "GradScalerOptions::allow_fp16_unscale.)";

}  // namespace

float GradScaler::HostValue::get(const Tensor& t) {
  if (!known || storage != t.raw_data() || version != t.version()) set(t, t.item<float>());
  return value;
}

GradScaler::GradScaler(const GradScalerOptions& options)
    : enabled_(options.enabled),
      init_scale_(options.init_scale),
      growth_factor_(options.growth_factor),
      backoff_factor_(options.backoff_factor),
      growth_interval_(options.growth_interval),
      options_(options) {
  if (!enabled_) return;
  MT_CHECK(growth_factor_ > 1.0, "The growth factor must be > 1.0.");
  MT_CHECK(backoff_factor_ < 1.0, "The backoff factor must be < 1.0.");
  MT_CHECK(!options.min_scale || !options.max_scale || *options.min_scale <= *options.max_scale,
           "GradScaler: min_scale (", options.min_scale.value_or(0), ") must be <= max_scale (",
           options.max_scale.value_or(0), ")");
  MT_CHECK(options.collapse.max_consecutive_skips >= 0 && options.collapse.scale_below >= 0.0,
           "GradScaler: collapse diagnostic thresholds must be >= 0");
}

Tensor GradScaler::scale(const Tensor& outputs) {
  if (!enabled_) return outputs;
  MT_CHECK(outputs.defined() && outputs.is_floating_point(),
           "GradScaler.scale: outputs must be a floating-point Tensor or a list of Tensors, got ",
           outputs.defined() ? describe(outputs) : std::string("an undefined tensor"));
  if (!scale_.defined()) {
    // Lazy creation on the device of the first output (PyTorch's _lazy_init_scale_growth_tracker).
    scale_ = scalar_tensor(init_scale_, {.dtype = kFloat32, .device = outputs.device()});
    growth_tracker_ =
        scalar_tensor(static_cast<double>(init_growth_tracker_), {.dtype = kInt32, .device = outputs.device()});
  } else if (scale_.device() != outputs.device()) {
    // The model moved (Module::to(Device)): the scale and its tracker follow, values unchanged.
    scale_ = scale_.to(outputs.device());
    growth_tracker_ = growth_tracker_.to(outputs.device());
  }
  // A 0-dim fp32 factor does not promote a 16-bit tensor with dims: a double scalar operand keeps
  // the tensor's dtype and the product is still formed in fp32.
  if (is_reduced_float(outputs.dtype()) && outputs.dim() > 0)
    return mul(outputs, static_cast<double>(scale_host_.get(scale_)));
  return mul(outputs, scale_);
}

std::vector<Tensor> GradScaler::scale(const std::vector<Tensor>& outputs) {
  std::vector<Tensor> out;
  out.reserve(outputs.size());
  for (const Tensor& t : outputs) out.push_back(scale(t));
  return out;
}

void GradScaler::check_scale(const char* method) const {
  MT_CHECK(scale_.defined(), "Attempted ", method,
           " but _scale is None.  This may indicate your script did not use scaler.scale(loss or outputs) earlier "
           "in the iteration.");
}

float GradScaler::inv_scale() const {
  // The reciprocal in fp64, rounded once to fp32 (an fp32 division would add a second rounding).
  return static_cast<float>(1.0 / static_cast<double>(scale_host_.get(scale_)));
}

void GradScaler::unscale_grads(optim::Optimizer& optimizer, OptimizerState& state, float inv, bool allow_fp16) {
  std::vector<Tensor> params = optimizer.parameters();
  std::vector<Tensor> grads;
  std::vector<size_t> index;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    if (!allow_fp16 && g.dtype() == kFloat16)
      MT_FAIL("Attempting to unscale FP16 gradients. (parameter ", optimizer.param_name(i), ", gradient ", describe(g),
              ")", kFp16Hint);
    grads.push_back(g);
    index.push_back(i);
  }
  if (grads.empty()) return;  // no inf check recorded: step()/update() report it
  NoGradGuard no_grad;
  Tensor found_inf = scalar_tensor(0.0, {.dtype = kFloat32, .device = scale_.device()});
  Tensor inv_t = scalar_tensor(static_cast<double>(inv), {.dtype = kFloat32, .device = scale_.device()});
  const int64_t first = detail::non_finite_check_and_unscale_(grads, found_inf, inv_t, /*check_only=*/inv == 1.0f);
  // found_inf started at 0 and the check sets it exactly when a gradient was not finite, which the
  // returned index already says: no read back, unless a reduction across processes changes it (a
  // reduction need not bump the version, so its result is always read).
  state.found_inf_host = {};
  if (options_.reduce_found_inf) options_.reduce_found_inf(found_inf);
  else state.found_inf_host.set(found_inf, first >= 0 ? 1.0f : 0.0f);
  state.found_inf = found_inf;
  state.first_nonfinite = first >= 0 ? static_cast<int64_t>(index[first]) : -1;
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!enabled_) return;
  check_scale("unscale_");
  OptimizerState& state = per_optimizer_[&optimizer];
  MT_CHECK(state.stage != Stage::kUnscaled,
           "unscale_() has already been called on this optimizer since the last update().");
  MT_CHECK(state.stage != Stage::kStepped, "unscale_() is being called after step().");
  unscale_grads(optimizer, state, inv_scale(), options_.allow_fp16_unscale);
  state.stage = Stage::kUnscaled;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  check_scale("step");
  OptimizerState& state = per_optimizer_[&optimizer];
  MT_CHECK(state.stage != Stage::kStepped, "step() has already been called since the last update().");
  bool stepped = false;
  if (optimizer.supports_fused_unscale()) {
    // Check only (inv 1, 16-bit accepted); the optimizer unscales in fp32 as it reads each gradient.
    // After an explicit unscale_() the gradients are unscaled already.
    float inv = 1.0f;
    if (state.stage == Stage::kReady) {
      unscale_grads(optimizer, state, 1.0f, /*allow_fp16=*/true);
      inv = inv_scale();
    }
    MT_CHECK(state.found_inf.defined(), "No inf checks were recorded for this optimizer.");
    stepped = optimizer.step_scaled(inv, state.found_inf_host.get(state.found_inf) != 0.0f);
  } else {
    if (state.stage == Stage::kReady) unscale_(optimizer);
    MT_CHECK(state.found_inf.defined(), "No inf checks were recorded for this optimizer.");
    stepped = state.found_inf_host.get(state.found_inf) == 0.0f;  // PyTorch's one host sync per step
    if (stepped) optimizer.step();
  }
  state.stage = Stage::kStepped;
  last_step_skipped_ = !stepped;
  if (!stepped) {
    ++total_skipped_steps_;
    last_nonfinite_param_ = state.first_nonfinite >= 0 ? optimizer.param_name(state.first_nonfinite) : std::string();
  }
  return stepped;
}

void GradScaler::update() {
  if (!enabled_) return;
  check_scale("update");
  bool recorded = false;
  float found = 0.0f;
  for (auto& [opt, state] : per_optimizer_) {
    if (!state.found_inf.defined()) continue;
    recorded = true;
    found += state.found_inf_host.get(state.found_inf);
  }
  MT_CHECK(recorded, "No inf checks were recorded prior to update.");
  Tensor found_inf = scalar_tensor(found, {.dtype = kFloat32, .device = scale_.device()});
  detail::update_scale_(scale_, growth_tracker_, found_inf, growth_factor_, backoff_factor_, growth_interval_);
  if (options_.min_scale || options_.max_scale) {
    double s = scale_host_.get(scale_);
    if (options_.min_scale) s = std::max(s, *options_.min_scale);
    if (options_.max_scale) s = std::min(s, *options_.max_scale);
    NoGradGuard no_grad;
    scale_.fill_(s);
  }
  finish_update(found != 0.0f);
}

void GradScaler::update(double new_scale) {
  if (!enabled_) return;
  check_scale("update");
  bool found = false;
  for (auto& [opt, state] : per_optimizer_)
    found |= state.found_inf.defined() && state.found_inf_host.get(state.found_inf) != 0.0f;
  NoGradGuard no_grad;
  scale_.fill_(new_scale);  // the growth tracker is left alone, as in PyTorch
  finish_update(found);
}

void GradScaler::update(const Tensor& new_scale) {
  if (!enabled_) return;
  MT_CHECK(new_scale.defined() && new_scale.numel() == 1 && new_scale.dtype() == kFloat32 && !new_scale.requires_grad(),
           "new_scale should be a float or a 1-element float32 tensor with requires_grad=false.");
  check_scale("update");
  MT_CHECK(new_scale.device().type == scale_.device().type, "GradScaler.update: new_scale is on ", new_scale.device(),
           " but the scale is on ", scale_.device());
  update(static_cast<double>(new_scale.item<float>()));  // a copy: later changes to new_scale do nothing
}

void GradScaler::finish_update(bool found_inf) {
  per_optimizer_.clear();
  if (found_inf) {
    ++consecutive_skipped_;
  } else {
    consecutive_skipped_ = 0;
    collapse_warned_ = false;
  }
  check_collapse();
}

void GradScaler::check_collapse() {
  const CollapseDiagnostic& c = options_.collapse;
  const bool by_count = c.max_consecutive_skips > 0 && consecutive_skipped_ >= c.max_consecutive_skips;
  const double s = get_scale();
  const bool by_scale = c.scale_below > 0.0 && s < c.scale_below;
  if (!by_count && !by_scale) return;
  if (c.action == CollapseAction::kWarn && collapse_warned_) return;
  std::string msg = mixtrain::detail::concat(
      "GradScaler: the loss scale is collapsing: ", consecutive_skipped_,
      " iteration(s) in a row had inf/NaN gradients and were skipped (", total_skipped_steps_,
      " skipped steps in total); the scale is now ", s,
      by_scale ? mixtrain::detail::concat(" (below the threshold ", c.scale_below, ")") : std::string(), ". ",
      last_nonfinite_param_.empty()
          ? std::string("No parameter with a non-finite gradient was recorded")
          : "The first parameter whose gradient was not finite in the last skipped step is '" + last_nonfinite_param_ +
                "'",
      ". Loss scaling cannot fix a forward pass that overflows (check the loss and activations for inf/NaN; "
      "softmax/log/exp of large values in fp16 are the usual culprits), a diverging learning rate, or a model "
      "whose values exceed the fp16 range (bf16 has fp32's range).");
  if (c.action == CollapseAction::kThrow) MT_FAIL(msg);
  collapse_warned_ = true;
  if (c.warn)
    c.warn(msg);
  else
    std::cerr << "mixtrain warning: " << msg << "\n";
}

double GradScaler::get_scale() const {
  if (!enabled_) return 1.0;
  return scale_.defined() ? static_cast<double>(scale_host_.get(scale_)) : init_scale_;
}

int64_t GradScaler::get_growth_tracker() const {
  if (!enabled_) return 0;
  return growth_tracker_.defined() ? static_cast<int64_t>(growth_tracker_.item<int32_t>()) : init_growth_tracker_;
}

GradScalerStateDict GradScaler::state_dict() const {
  if (!enabled_) return {};
  return {{"scale", get_scale()},
          {"growth_factor", growth_factor_},
          {"backoff_factor", backoff_factor_},
          {"growth_interval", static_cast<double>(growth_interval_)},
          {"_growth_tracker", static_cast<double>(get_growth_tracker())}};
}

void GradScaler::load_state_dict(const GradScalerStateDict& sd) {
  if (!enabled_) return;
  MT_CHECK(!sd.empty(),
           "The source state dict is empty, possibly because it was saved from a disabled instance of GradScaler.");
  auto get = [&](const char* key) {
    auto it = sd.find(key);
    MT_CHECK(it != sd.end(), "GradScaler.load_state_dict: missing key '", key, "'");
    return it->second;
  };
  // Read and check every key before changing anything: a state dict can come from a file, and a
  // scale of 0 or a non-integer interval would corrupt every later step (or overflow a cast).
  const double scale = get("scale"), growth = get("growth_factor"), backoff = get("backoff_factor");
  const double interval = get("growth_interval"), tracker = get("_growth_tracker");
  auto integral = [](double v, double lo, double hi) { return v >= lo && v <= hi && v == std::floor(v); };
  MT_CHECK(std::isfinite(scale) && scale > 0 && scale <= std::numeric_limits<float>::max(),
           "GradScaler.load_state_dict: scale must be a finite fp32 value > 0, got ", scale);
  MT_CHECK(std::isfinite(growth) && growth > 1.0, "GradScaler.load_state_dict: growth_factor must be > 1, got ", growth);
  MT_CHECK(std::isfinite(backoff) && backoff > 0.0 && backoff < 1.0,
           "GradScaler.load_state_dict: backoff_factor must be in (0, 1), got ", backoff);
  MT_CHECK(integral(interval, 1, std::numeric_limits<int32_t>::max()),
           "GradScaler.load_state_dict: growth_interval must be an integer in [1, 2^31 - 1], got ", interval);
  // The tracker is an int32 counter. Above growth_interval it only delays growth (PyTorch's tests set
  // such values), so the bound is the type's.
  MT_CHECK(integral(tracker, 0, std::numeric_limits<int32_t>::max()),
           "GradScaler.load_state_dict: _growth_tracker must be an integer in [0, 2^31 - 1], got ", tracker);
  init_scale_ = scale;
  growth_factor_ = growth;
  backoff_factor_ = backoff;
  growth_interval_ = static_cast<int64_t>(interval);
  init_growth_tracker_ = static_cast<int64_t>(tracker);
  NoGradGuard no_grad;
  if (scale_.defined()) scale_.fill_(scale);
  if (growth_tracker_.defined()) growth_tracker_.fill_(tracker);
}

}  // namespace mixtrain::amp
