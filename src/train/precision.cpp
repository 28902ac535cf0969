// The precision switch: names, the scaler rule, validation and the mode-(b) model conversion.
#include "mixtrain/train/precision.h"

#include <string>

#include "kernels/linalg.h"
#include "mixtrain/error.h"
#include "mixtrain/dist/zero.h"
#include "mixtrain/optim/adam.h"

namespace mixtrain::train {

std::string_view to_string(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    case Precision::kFp8: return "fp8";
  }
  return "?";
}

std::string_view to_string(ScalerMode mode) {
  switch (mode) {
    case ScalerMode::kAuto: return "auto";
    case ScalerMode::kOn: return "on";
    case ScalerMode::kOff: return "off";
  }
  return "?";
}

std::string_view to_string(WeightUpdate mode) {
  switch (mode) {
    case WeightUpdate::kMaster: return "master";
    case WeightUpdate::kStochastic: return "stochastic";
    case WeightUpdate::kKahan: return "kahan";
    case WeightUpdate::kNearest: return "nearest";
  }
  return "?";
}

WeightUpdate parse_weight_update(std::string_view text) {
  for (WeightUpdate m : {WeightUpdate::kMaster, WeightUpdate::kStochastic, WeightUpdate::kKahan, WeightUpdate::kNearest})
    if (text == to_string(m)) return m;
  MT_FAIL("unknown weight update '", text, "' (valid: master, stochastic, kahan, nearest)");
}

std::string_view short_dtype_name(DType dtype) {
  if (dtype == kFloat32) return "fp32";
  if (dtype == kBFloat16) return "bf16";
  if (dtype == kFloat16) return "fp16";
  MT_FAIL("parameter dtype must be float32, bfloat16 or float16, got ", dtype);
}

Precision parse_precision(std::string_view text) {
  if (text == "fp32" || text == "float32") return Precision::kFp32;
  if (text == "bf16" || text == "bfloat16") return Precision::kBf16;
  if (text == "fp16" || text == "float16") return Precision::kFp16;
  if (text == "fp8") return Precision::kFp8;
  MT_FAIL("unknown precision '", text, "' (valid: fp32, bf16, fp16, fp8)");
}

ScalerMode parse_scaler_mode(std::string_view text) {
  if (text == "auto") return ScalerMode::kAuto;
  if (text == "on") return ScalerMode::kOn;
  if (text == "off") return ScalerMode::kOff;
  MT_FAIL("unknown scaler mode '", text, "' (valid: auto, on, off)");
}

DType parse_param_dtype(std::string_view text) {
  if (text == "fp32" || text == "float32") return kFloat32;
  if (text == "bf16" || text == "bfloat16") return kBFloat16;
  if (text == "fp16" || text == "float16") return kFloat16;
  MT_FAIL("unknown master-weight dtype '", text, "' (valid: fp32, bf16, fp16)");
}

std::optional<DType> autocast_dtype(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return std::nullopt;
    case Precision::kBf16: return kBFloat16;
    case Precision::kFp16: return kFloat16;
    case Precision::kFp8: return kBFloat16;
  }
  return std::nullopt;
}

std::string products(Precision precision, Device device) {
  const std::optional<DType> compute = autocast_dtype(precision);
  if (!compute) return "fp32";
  std::string s(short_dtype_name(*compute));
  if (kernels::uses_fp32_route(device, *compute)) s += " via fp32";
  // FP8 linear layers are emulated: quantised operands multiplied in fp32 (amp/fp8.h).
  return precision == Precision::kFp8 ? "fp8 emulated in fp32 (linear), " + s : s;
}

bool uses_scaler(Precision precision, ScalerMode mode) {
  if (mode == ScalerMode::kOn) return true;
  if (mode == ScalerMode::kOff) return false;
  // bf16 keeps fp32's 8 exponent bits: gradients do not underflow, so PyTorch's recipe (and ours)
  // scales only fp16.
  return precision == Precision::kFp16;
}

void validate(const PrecisionConfig& config) {
  const DType p = config.param_dtype;
  if (config.precision == Precision::kFp8) config.fp8.validate();
  MT_CHECK(p == kFloat32 || p == kBFloat16 || p == kFloat16, "master weights: parameter dtype must be fp32, bf16 or ",
           "fp16, got ", p);
  MT_CHECK(!config.compact_state || p == kBFloat16, "compact optimizer state needs bf16 parameters (--master-weights ",
           "bf16): its packed master stores the bf16 parameter as the upper half of the fp32 master; got parameter ",
           "dtype ", short_dtype_name(p));
  MT_CHECK(config.weight_update == WeightUpdate::kMaster || (p == kBFloat16 && !config.compact_state),
           "--weight-update ", to_string(config.weight_update), " updates bf16 weights without fp32 masters: it needs ",
           "--master-weights bf16 (got ", short_dtype_name(p), ")", config.compact_state ? " and no --compact-state" : "",
           "");
  if (p == kFloat32) return;
  // A 16-bit parameter can only meet activations of its own dtype: autocast casts the fp32 inputs
  // to the region's dtype, and two different 16-bit dtypes in one op are an error.
  MT_CHECK(autocast_dtype(config.precision) == p, "--master-weights ", short_dtype_name(p), " needs --precision ",
           short_dtype_name(p), " (16-bit parameters run only under autocast to their own dtype), got --precision ",
           to_string(config.precision), "; use --master-weights fp32 for fp32 parameters");
}

void prepare_model(nn::Module& model, const PrecisionConfig& config) {
  validate(config);
  if (config.param_dtype != kFloat32) model.to(config.param_dtype);
}

void prepare_optimizer(optim::Optimizer& optimizer, const PrecisionConfig& config) {
  validate(config);
  // A sharded optimizer's state lives in its rank's local optimizer: prepare that one.
  if (auto* zero = dynamic_cast<dist::ZeroRedundancyOptimizer*>(&optimizer))
    return prepare_optimizer(zero->local_optimizer(), config);
  if (config.weight_update != WeightUpdate::kMaster) {
    auto* adam = dynamic_cast<optim::Adam*>(&optimizer);
    MT_CHECK(adam != nullptr, "--weight-update ", to_string(config.weight_update), " is implemented for Adam/AdamW, ",
             "not ", optimizer.name());
    optimizer.release_masters();
    for (size_t g = 0; g < adam->num_param_groups(); ++g) {
      optim::AdamOptions& o = adam->options(g);
      o.bf16_update = config.weight_update == WeightUpdate::kStochastic ? optim::Bf16Update::kStochastic
                      : config.weight_update == WeightUpdate::kKahan    ? optim::Bf16Update::kKahan
                                                                        : optim::Bf16Update::kNearest;
      o.rounding_seed = config.rounding_seed;
      o.exp_avg_dtype = kBFloat16;
      o.exp_avg_sq_dtype = kBFloat16;
    }
    return;
  }
  if (!config.compact_state) return;
  optimizer.pack_masters();
  MT_CHECK(optimizer.has_packed_masters(), "compact optimizer state: the optimizer has no fp32 master for any bf16 ",
           "parameter (was it built with master_weights = false, or before the model was converted?)");
  if (auto* adam = dynamic_cast<optim::Adam*>(&optimizer))
    for (size_t g = 0; g < adam->num_param_groups(); ++g) adam->options(g).exp_avg_dtype = kBFloat16;
}

}  // namespace mixtrain::train
