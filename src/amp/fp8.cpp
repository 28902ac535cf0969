// FP8 training (amp/fp8.h): the recipe, delayed scaling, the Fp8Autocast region and fp8_linear.
#include "mixtrain/amp/fp8.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "amp/autocast_state.h"
#include "kernels/fp8.h"
#include "mixtrain/autograd.h"
#include "mixtrain/ops/linalg.h"
#include "mixtrain/ops/reduce.h"
#include "ops/autocast_hook.h"

namespace mixtrain::amp {

// ---------------------------------------------------------------------------------------------
// Recipe

void Fp8Recipe::validate() const {
  MT_CHECK(amax_history_len >= 1 && amax_history_len <= 65536,
           "fp8 recipe: amax_history_len must be in 1..65536, got ", amax_history_len);
  MT_CHECK(margin >= 0 && margin <= 32, "fp8 recipe: margin must be in 0..32, got ", margin);
  MT_CHECK(format == Format::kHybrid || format == Format::kAllE4M3, "fp8 recipe: unknown format ",
           static_cast<int>(format));
  MT_CHECK(amax_compute == AmaxCompute::kMax || amax_compute == AmaxCompute::kMostRecent,
           "fp8 recipe: unknown amax_compute ", static_cast<int>(amax_compute));
}

std::string_view to_string(Fp8Recipe::Format format) { return format == Fp8Recipe::Format::kHybrid ? "hybrid" : "e4m3"; }

std::string_view to_string(Fp8Recipe::AmaxCompute compute) {
  return compute == Fp8Recipe::AmaxCompute::kMax ? "max" : "most_recent";
}

Fp8Recipe::Format parse_fp8_format(std::string_view text) {
  if (text == "hybrid") return Fp8Recipe::Format::kHybrid;
  if (text == "e4m3") return Fp8Recipe::Format::kAllE4M3;
  MT_FAIL("unknown fp8 format '", text, "' (valid: hybrid, e4m3)");
}

Fp8Recipe::AmaxCompute parse_amax_compute(std::string_view text) {
  if (text == "max") return Fp8Recipe::AmaxCompute::kMax;
  if (text == "most_recent") return Fp8Recipe::AmaxCompute::kMostRecent;
  MT_FAIL("unknown fp8 amax computation '", text, "' (valid: max, most_recent)");
}

// ---------------------------------------------------------------------------------------------
// Delayed scaling

void Fp8Scaling::update(float amax, const Fp8Recipe& recipe, Fp8Format format) {
  if (!std::isfinite(amax)) return;  // see amp/fp8.h: one bad tensor must not pin the scale
  history_.push_back(amax);
  const size_t keep = static_cast<size_t>(recipe.amax_history_len);
  if (history_.size() > keep) history_.erase(history_.begin(), history_.end() - static_cast<std::ptrdiff_t>(keep));
  const float reduced = recipe.amax_compute == Fp8Recipe::AmaxCompute::kMax
                            ? *std::max_element(history_.begin(), history_.end())
                            : history_.back();
  if (!(reduced > 0.0f)) return;
  const float next = std::ldexp(fp8_max(format) / reduced, -recipe.margin);
  if (!std::isfinite(next) || !(next > 0.0f)) return;
  scale_ = next;
  scale_inv_ = 1.0f / next;
}

void Fp8Scaling::restore(float scale, std::vector<float> amax_history) {
  MT_CHECK(std::isfinite(scale) && scale > 0.0f, "fp8 scaling: a saved scale must be finite and > 0, got ", scale);
  for (float a : amax_history)
    MT_CHECK(std::isfinite(a) && a >= 0.0f, "fp8 scaling: a saved amax must be finite and >= 0, got ", a);
  scale_ = scale;
  scale_inv_ = 1.0f / scale;
  history_ = std::move(amax_history);
}

// ---------------------------------------------------------------------------------------------
// The region

namespace {

struct Fp8RegionState {
  bool enabled = false;
  Fp8Recipe recipe;
};

Fp8RegionState& region_state() {
  thread_local Fp8RegionState s;
  return s;
}

}  // namespace

Fp8Autocast::Fp8Autocast(const Fp8AutocastOptions& options)
    : previous_enabled_(region_state().enabled), previous_recipe_(region_state().recipe) {
  if (options.enabled) options.recipe.validate();
  Fp8RegionState& s = region_state();
  s.enabled = options.enabled;
  if (options.enabled) s.recipe = options.recipe;
}

Fp8Autocast::~Fp8Autocast() {
  Fp8RegionState& s = region_state();
  s.enabled = previous_enabled_;
  s.recipe = previous_recipe_;
}

bool is_fp8_enabled() { return region_state().enabled; }
const Fp8Recipe& fp8_recipe() { return region_state().recipe; }

// ---------------------------------------------------------------------------------------------
// fp8_linear

namespace {

bool quantizable(const Tensor& t) {
  return t.dtype() == kFloat32 || t.dtype() == kBFloat16 || t.dtype() == kFloat16;
}

struct Quantized {
  Tensor codes;     // uint8, the shape of the source
  float scale_inv;  // of the scale the codes were made with
};

// Quantises `t` with `scaling`'s current scale, then records its amax when `record`.
Quantized quantize(const Tensor& t, Fp8Scaling& scaling, const Fp8Recipe& recipe, Fp8Format format, bool record = true) {
  const Tensor src = t.contiguous();
  Quantized q{Tensor::empty(src.shape(), kUInt8, src.device()), scaling.scale_inv()};
  const float amax = kernels::fp8_quantize(q.codes, src, scaling.scale(), format);
  if (record) scaling.update(amax, recipe, format);
  return q;
}

Tensor dequantize(const Quantized& q, Fp8Format format) {
  Tensor out = Tensor::empty(q.codes.shape(), kFloat32, q.codes.device());
  kernels::fp8_dequantize(out, q.codes, q.scale_inv, format);
  return out;
}

// The output dtype: what linear would produce here (the autocast dtype inside an enabled region on
// x's device type), else x's own.
DType output_dtype(const Tensor& x) {
  const detail::AutocastState& s = detail::state();
  if (ops::autocast_active() && s.device_type == x.device().type) return s.dtype;
  return x.dtype();
}

}  // namespace

Tensor fp8_linear(const Tensor& x, const Tensor& w, const Tensor& b, const std::shared_ptr<Fp8LinearState>& state,
                  const Fp8Recipe& recipe) {
  MT_CHECK(state != nullptr, "fp8_linear: no scaling state given");
  recipe.validate();
  MT_CHECK(x.defined() && quantizable(x) && x.dim() >= 1,
           "fp8_linear: expected an fp32, bf16 or fp16 input [..., in], got ",
           x.defined() ? describe(x) : std::string("an undefined tensor"));
  MT_CHECK(w.defined() && quantizable(w) && w.dim() == 2 && w.size(1) == x.size(-1), "fp8_linear: expected an fp32, ",
           "bf16 or fp16 weight [out, ", x.size(-1), "] for the input ", describe(x), ", got ",
           w.defined() ? describe(w) : std::string("none"));
  MT_CHECK(!b.defined() || (quantizable(b) && b.dim() == 1 && b.size(0) == w.size(0)), "fp8_linear: expected a bias [",
           w.size(0), "] (fp32, bf16 or fp16), got ", b.defined() ? describe(b) : std::string("none"));
  MT_CHECK(w.device() == x.device() && (!b.defined() || b.device() == x.device()),
           "fp8_linear: input, weight and bias must be on one device, got ", x.device(), ", ", w.device(),
           b.defined() ? mixtrain::detail::concat(", ", b.device()) : std::string());

  const DType out_dtype = output_dtype(x);
  const int64_t in = w.size(1), out = w.size(0);
  int64_t rows = 1;
  for (int d = 0; d < x.dim() - 1; ++d) rows *= x.size(d);
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = out;

  const Fp8Format fwd = recipe.forward_format(), bwd = recipe.backward_format();
  // Only training forwards move the scales: evaluation and inference (grad mode off) quantise with
  // the current ones, so evaluating a model does not change how it trains.
  const bool record = GradMode::is_enabled();
  Quantized xq, wq;
  Tensor y;
  {
    NoGradGuard no_grad;
    ops::AutocastRegionGuard plain(true);  // the fp32 products below must not be cast again
    xq = quantize(x.detach(), state->input, recipe, fwd, record);
    wq = quantize(w.detach(), state->weight, recipe, fwd, record);
    const Tensor bias = b.defined() ? b.detach().to(kFloat32) : Tensor();
    y = linear(dequantize(xq, fwd).reshape({rows, in}), dequantize(wq, fwd), bias).to(out_dtype).reshape(out_shape);
  }
  if (!autograd::needs_grad({&x, &w, &b})) return y;

  const bool need_x = x.requires_grad(), need_w = w.requires_grad(), need_b = b.defined() && b.requires_grad();
  autograd::record(
      "fp8_linear", {x, w, b}, y,
      [xq = need_w ? xq : Quantized{}, wq = need_x ? wq : Quantized{}, state, recipe, fwd, bwd, need_x, need_w,
       need_b, rows, in, out, x_shape = x.shape(), x_dtype = x.dtype(), w_dtype = w.dtype(),
       b_dtype = b.defined() ? b.dtype() : kFloat32](const autograd::TensorList& grads) {
        NoGradGuard no_grad;
        ops::AutocastRegionGuard plain(true);
        const Tensor gy = grads[0].reshape({rows, out});
        const Quantized gq = quantize(gy, state->grad_output, recipe, bwd);
        const Tensor g = dequantize(gq, bwd);
        autograd::TensorList result(3);
        if (need_x) result[0] = matmul(g, dequantize(wq, fwd)).to(x_dtype).reshape(x_shape);
        if (need_w) result[1] = matmul(g.t(), dequantize(xq, fwd).reshape({rows, in})).to(w_dtype);
        if (need_b) result[2] = sum(gy, {0}, false, kFloat32).to(b_dtype);
        return result;
      });
  return y;
}

}  // namespace mixtrain::amp
