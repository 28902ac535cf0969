// NumericsMonitor: per-site range statistics of activations, gradients and parameters against the
// 16-bit and FP8 formats (nn/numerics_monitor.h).
#include "mixtrain/nn/numerics_monitor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "mixtrain/error.h"
#include "mixtrain/half.h"

namespace mixtrain::nn {

namespace {

// The magnitudes that decide a cast, per format: largest finite value, smallest normal and
// subnormal, and where rounding starts to overflow (ties to even: fp16, bf16 and E5M2 round the tie
// to inf; E4M3FN rounds 464 down to 448, so only values above it overflow).
struct FormatRange {
  double max, min_normal, min_subnormal, overflow_at;
  bool overflow_at_tie;
};
constexpr FormatRange kRanges[TensorNumerics::kNumFormats] = {
    {65504.0, 0x1p-14, 0x1p-24, 65520.0, true},                                   // fp16
    {0x1.fep127, 0x1p-126, 0x1p-133, 0x1.ffp127, true},                           // bf16
    {448.0, 0x1p-6, 0x1p-9, 464.0, false},                                        // e4m3fn
    {57344.0, 0x1p-14, 0x1p-16, 61440.0, true},                                   // e5m2
};

bool overflows(const FormatRange& r, double a) { return r.overflow_at_tie ? a >= r.overflow_at : a > r.overflow_at; }

std::string site_path(const std::string& scope) { return scope.empty() ? "-" : scope; }

std::string fmt(double v, const char* f = "%.3g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string percent(double fraction) {
  if (fraction == 0) return "0";
  if (fraction < 1e-4) return "<0.01%";
  return fmt(100 * fraction, "%.2f") + "%";
}

}  // namespace

const char* TensorNumerics::format_name(int f) {
  static const char* names[] = {"fp16", "bf16", "e4m3", "e5m2"};
  return names[f];
}

void TensorNumerics::add(const float* x, int64_t n) {
  ++samples;
  elements += n;
  double tensor_amax = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = std::fabs(static_cast<double>(x[i]));
    if (std::isfinite(a)) tensor_amax = std::max(tensor_amax, a);
  }
  amax = std::max(amax, tensor_amax);
  double scale[kNumFormats];
  for (int f = 0; f < kNumFormats; ++f) scale[f] = tensor_amax > 0 ? kRanges[f].max / tensor_amax : 1.0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const double a = std::fabs(static_cast<double>(v));
    if (!std::isfinite(a)) {
      ++nonfinite;
      continue;
    }
    if (a == 0) {
      ++zeros;
      continue;
    }
    amin_nonzero = amin_nonzero == 0 ? a : std::min(amin_nonzero, a);
    for (int f = 0; f < kNumFormats; ++f) {
      const FormatRange& r = kRanges[f];
      if (a <= r.min_subnormal / 2) {
        ++flush[f];
      } else if (a < r.min_normal) {
        ++subnormal[f];
      } else if (overflows(r, a)) {
        ++overflow[f];
      }
      if (f >= kE4M3 && a * scale[f] <= r.min_subnormal / 2) ++scaled_flush[f];
    }
    rel_error_sum[0] += std::fabs(a - std::fabs(static_cast<double>(static_cast<float>(bfloat16(v))))) / a;
    ++rel_error_count[0];
    if (!overflows(kRanges[kFp16], a)) {
      rel_error_sum[1] += std::fabs(a - std::fabs(static_cast<double>(static_cast<float>(float16(v))))) / a;
      ++rel_error_count[1];
    }
  }
}

double TensorNumerics::fraction(int64_t count) const {
  const int64_t base = nonzero_finite();
  return base > 0 ? static_cast<double>(count) / static_cast<double>(base) : 0.0;
}

double TensorNumerics::mean_rel_error(int f) const {
  const int k = f == kBf16 ? 0 : 1;
  return rel_error_count[k] > 0 ? rel_error_sum[k] / static_cast<double>(rel_error_count[k]) : 0.0;
}

std::string TensorNumerics::recommendation(bool gradient) const {
  if (nonzero_finite() == 0) return "no data";
  if (overflow[kFp16] > 0) return "bf16/fp32 (fp16 overflows)";
  // More than 0.1% of the values flushing to zero, or 1% losing precision in the subnormal range, is
  // a visible loss (PyTorch's AMP guide scales the loss for the same reason); less is rounding noise.
  if (fraction(flush[kFp16]) > 1e-3 || fraction(subnormal[kFp16]) > 1e-2)
    return gradient ? "fp16 with loss scaling" : "bf16/fp32 (too small for fp16)";
  return "fp16 ok";
}

struct NumericsMonitor::State {
  std::mutex mutex;
  std::atomic<bool> sampling{false};  // read by the observer without the lock
  int64_t step = 0, sampled = 0;
  double min_scale = 0, max_scale = 0;  // loss scales of the sampled steps (0: none sampled yet)
  std::map<std::string, TensorNumerics> sites;

  void add(const std::string& key, const Tensor& t) {
    if (!t.defined() || !t.is_floating_point() || t.numel() == 0) return;
    const std::vector<float> v = t.detach().to(Device{}).to(kFloat32).contiguous().to_vector<float>();
    sites[key].add(v.data(), static_cast<int64_t>(v.size()));
  }
};

NumericsMonitor::NumericsMonitor(Module& model, NumericsOptions options) : NumericsMonitor(options) {
  model_ = &model;
  model.set_scope_names();
}

NumericsMonitor::NumericsMonitor(NumericsOptions options) : state_(std::make_shared<State>()) {
  MT_CHECK(options.every >= 1, "NumericsMonitor: every must be >= 1, got ", options.every);
  const int64_t every = options.every;
  std::weak_ptr<State> weak = state_;
  observer_id_ = autograd::add_op_observer([weak](const autograd::OpEvent& e) {
    std::shared_ptr<State> s = weak.lock();
    if (!s || !s->sampling) return;
    std::lock_guard<std::mutex> lock(s->mutex);
    NoGradGuard no_grad;
    const std::string key = std::string(e.backward ? "backward " : "forward ") + site_path(e.scope) + "/" + e.op;
    for (const Tensor& t : e.outputs) s->add(key, t);
  });
  every_ = every;
}

NumericsMonitor::~NumericsMonitor() { autograd::remove_op_observer(observer_id_); }

bool NumericsMonitor::begin_step(int64_t step, double loss_scale) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->step = step;
  state_->sampling = (step - 1) % every_ == 0;
  if (state_->sampling) {
    ++state_->sampled;
    state_->min_scale = state_->min_scale == 0 ? loss_scale : std::min(state_->min_scale, loss_scale);
    state_->max_scale = std::max(state_->max_scale, loss_scale);
  }
  return state_->sampling;
}

bool NumericsMonitor::sampling() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->sampling;
}

void NumericsMonitor::record_parameters() {
  if (model_ == nullptr) return;
  for (const auto& [name, p] : model_->named_parameters()) record_parameter(name, p);
}

void NumericsMonitor::record_parameter(const std::string& name, const Tensor& param) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (!state_->sampling) return;
  NoGradGuard no_grad;
  state_->add("param " + name, param);
  if (param.grad().defined()) state_->add("grad " + name, param.grad());
}

void NumericsMonitor::end_step() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->sampling = false;
}

std::map<std::string, TensorNumerics> NumericsMonitor::sites() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->sites;
}

int64_t NumericsMonitor::sampled_steps() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->sampled;
}

std::string NumericsMonitor::report_markdown(const std::string& title) const {
  const std::map<std::string, TensorNumerics> all = sites();
  double min_scale = 0, max_scale = 0;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    min_scale = state_->min_scale;
    max_scale = state_->max_scale;
  }
  std::ostringstream os;
  os << "# " << title << "\n\n"
     << "Sampled steps: " << sampled_steps() << ", loss scale " << fmt(min_scale)
     << (max_scale != min_scale ? " to " + fmt(max_scale) : std::string()) << ". Percentages are of the non-zero finite values. *flush*: would "
     << "round to zero when cast as is; *sub*: lands in the subnormal range (precision lost); *ovf*: rounds past the "
     << "largest finite value; *scaled flush*: flushes to zero after per-tensor scaling of amax to the FP8 maximum. "
     << "Gradients are as backward produced them (with a GradScaler: still multiplied by the loss scale).\n\n";
  const std::pair<const char*, const char*> kinds[] = {{"forward ", "Activations (op outputs, forward)"},
                                                       {"backward ", "Gradients (backward node outputs)"},
                                                       {"param ", "Parameters"},
                                                       {"grad ", "Parameter gradients"}};
  std::map<std::string, int> counts;
  for (const auto& [prefix, heading] : kinds) {
    os << "## " << heading << "\n\n"
       << "| site | amax | min non-zero | zeros | fp16 flush | fp16 sub | fp16 ovf | bf16 flush | e4m3 ovf | "
          "e4m3 scaled flush | e5m2 scaled flush | bf16 rel. err | fp16 rel. err | recommendation |\n"
       << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
    for (const auto& [key, n] : all) {
      if (key.rfind(prefix, 0) != 0) continue;
      const bool gradient = std::string(prefix) == "backward " || std::string(prefix) == "grad ";
      const std::string rec = n.recommendation(gradient);
      ++counts[std::string(prefix) + rec];
      os << "| `" << key.substr(std::string(prefix).size()) << "` | " << fmt(n.amax) << " | " << fmt(n.amin_nonzero)
         << " | " << percent(static_cast<double>(n.zeros) / static_cast<double>(std::max<int64_t>(n.elements, 1)))
         << " | " << percent(n.fraction(n.flush[TensorNumerics::kFp16])) << " | "
         << percent(n.fraction(n.subnormal[TensorNumerics::kFp16])) << " | "
         << percent(n.fraction(n.overflow[TensorNumerics::kFp16])) << " | "
         << percent(n.fraction(n.flush[TensorNumerics::kBf16])) << " | "
         << percent(n.fraction(n.overflow[TensorNumerics::kE4M3])) << " | "
         << percent(n.fraction(n.scaled_flush[TensorNumerics::kE4M3])) << " | "
         << percent(n.fraction(n.scaled_flush[TensorNumerics::kE5M2])) << " | "
         << fmt(n.mean_rel_error(TensorNumerics::kBf16), "%.2e") << " | "
         << fmt(n.mean_rel_error(TensorNumerics::kFp16), "%.2e") << " | " << rec << " |\n";
    }
    os << "\n";
  }
  os << "## Summary\n\n";
  for (const auto& [key, count] : counts) os << "- " << key << ": " << count << " sites\n";
  return os.str();
}

void NumericsMonitor::write_report(const std::string& dir, const std::string& title) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MT_CHECK(!ec, "NumericsMonitor: cannot create '", dir, "': ", ec.message());
  {
    std::ofstream md(dir + "/report.md");
    md << report_markdown(title);
    MT_CHECK(md.good(), "NumericsMonitor: cannot write '", dir, "/report.md'");
  }
  std::ofstream dat(dir + "/numerics.dat");
  dat << "# index amax min_nonzero kind site\n";
  int i = 0;
  for (const auto& [key, n] : sites()) {
    const std::string kind = key.substr(0, key.find(' '));
    dat << i++ << " " << n.amax << " " << n.amin_nonzero << " " << kind << " " << key.substr(key.find(' ') + 1) << "\n";
  }
  MT_CHECK(dat.good(), "NumericsMonitor: cannot write '", dir, "/numerics.dat'");
}

}  // namespace mixtrain::nn
