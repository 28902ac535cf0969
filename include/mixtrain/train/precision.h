// mixtrain/train/precision.h: the one precision switch of the Trainer and the CLI.
//
//   precision   fp32: plain fp32 training (no autocast)
//               bf16: forward + loss under mt::amp::Autocast(kCPU, kBFloat16)
//               fp16: forward + loss under mt::amp::Autocast(kCPU, kFloat16)
//               fp8:  as bf16, and nn::Linear layers in FP8 under mt::amp::Fp8Autocast with the
//                     recipe `fp8` (E4M3 forward, E5M2 gradients, delayed scaling; amp/fp8.h),
//                     emulated on the CPU: for accuracy studies, not for speed
//   scaler      auto: a GradScaler for fp16 only (bf16 has fp32's exponent range: nothing underflows;
//               FP8 layers scale each tensor themselves)
//               on / off: forced (PyTorch accepts a scaler with any dtype; scaling bf16 is harmless)
//   parameters  fp32 (default): fp32 weights used through autocast, mode (a) of optim/optimizer.h
//               bf16 / fp16: the model is converted to that dtype and the optimizer keeps fp32
//               master weights, mode (b). It must be the precision's own dtype: an fp16 weight in a
//               bf16 region (or in plain fp32 training) is a dtype mismatch, not a precision mode.
//
//   compact_state  bf16 parameters only (mode c of optim/optimizer.h): the optimizer stores each fp32
//               master packed (the bf16 parameter + its lower 16 bits) and, for Adam/AdamW, the first
//               moment in bf16: 12 bytes of model state per parameter instead of 16 (params 2, grads
//               2, master low half 2, m 2, v 4). The master is exact; the forward pass sees it
//               truncated to bf16 instead of rounded to nearest.
//
//   weight_update  bf16 parameters only: how an update reaches a weight.
//               master (default): through the fp32 master (mode b, or c with compact_state)
//               stochastic: no master; the bf16 weight is updated in place with stochastic rounding,
//                 AdamW's moments in bf16 (v stochastically rounded too): 8 bytes per parameter
//               kahan: no master; round to nearest plus a bf16 Kahan compensation, bf16 moments:
//                 10 bytes per parameter
//               nearest: no master; round to nearest, bf16 moments (v stochastically rounded): 8
//                 bytes, and every update below half a bf16 ulp of its weight is lost (what a
//                 model simply converted to bf16 does); for comparisons
//               (optim/adam.h explains the modes; rounding_seed seeds the stochastic bits.)
//
// The CLI spells the parameter dtype `--master-weights fp32|bf16|fp16`: "fp32" means the fp32
// parameters are themselves the master weights; "bf16"/"fp16" means 16-bit parameters whose fp32
// masters live in the optimizer.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "mixtrain/amp/fp8.h"
#include "mixtrain/amp/grad_scaler.h"
#include "mixtrain/dtype.h"
#include "mixtrain/nn/module.h"
#include "mixtrain/optim/optimizer.h"

namespace mixtrain::train {

enum class Precision { kFp32, kBf16, kFp16, kFp8 };
enum class ScalerMode { kAuto, kOn, kOff };
enum class WeightUpdate { kMaster, kStochastic, kKahan, kNearest };

struct PrecisionConfig {
  Precision precision = Precision::kFp32;
  ScalerMode scaler = ScalerMode::kAuto;
  // dtype of the model's parameters: kFloat32 (mode a) or the precision's 16-bit dtype (mode b).
  DType param_dtype = kFloat32;
  // Packed masters + bf16 first moment (see above); needs param_dtype == kBFloat16.
  bool compact_state = false;
  // How updates reach bf16 weights (see above); anything but kMaster needs param_dtype == kBFloat16
  // and no compact_state.
  WeightUpdate weight_update = WeightUpdate::kMaster;
  uint64_t rounding_seed = 0;
  // GradScaler settings when the scaler is on (`enabled` is ignored: the scaler rule decides).
  amp::GradScalerOptions scaler_options = {};
  // The FP8 recipe of precision fp8 (ignored otherwise).
  amp::Fp8Recipe fp8 = {};
};

// "fp32", "bf16", "fp16", "fp8".
std::string_view to_string(Precision precision);
std::string_view to_string(ScalerMode mode);
std::string_view to_string(WeightUpdate mode);  // "master", "stochastic", "kahan", "nearest"
// The CLI spelling of a parameter dtype: "fp32", "bf16", "fp16".
std::string_view short_dtype_name(DType dtype);

// Parse the CLI spellings (also "float32", "bfloat16", "float16"); mt::Error listing the valid
// values otherwise.
Precision parse_precision(std::string_view text);
ScalerMode parse_scaler_mode(std::string_view text);
WeightUpdate parse_weight_update(std::string_view text);
DType parse_param_dtype(std::string_view text);

// The autocast dtype of a precision; nullopt for fp32 (no autocast region); bf16 for fp8 (the
// layers that do not run in FP8).
std::optional<DType> autocast_dtype(Precision precision);

// How the matrix products and convolutions of `precision` compute on `device`, for logs and
// summaries: "fp32"; "bf16" (the backend's native 16-bit kernels); "bf16 via fp32" / "fp16 via
// fp32" (the exact fp32 route: operands widened, fp32 kernel, result rounded once); for fp8
// "fp8 emulated in fp32 (linear), " followed by the bf16 answer for the other products. The
// answer depends on the CPU (AMX or an AMD AVX512-BF16 core make bf16 native) and on
// MIXTRAIN_BF16_PATH / MIXTRAIN_MAX_ISA; may throw mt::Error for an invalid MIXTRAIN_BF16_PATH.
std::string products(Precision precision, Device device);

// The scaler rule: on for fp16 under kAuto, else as forced.
bool uses_scaler(Precision precision, ScalerMode mode);
inline bool uses_scaler(const PrecisionConfig& config) { return uses_scaler(config.precision, config.scaler); }

// Throws mt::Error when the combination is invalid (a 16-bit parameter dtype that is not the
// precision's autocast dtype, compact_state without bf16 parameters).
void validate(const PrecisionConfig& config);

// Converts the model's parameters to config.param_dtype (mode b; nothing for fp32). Call it before
// constructing the optimizer: the optimizer creates the fp32 masters from the 16-bit parameters
// it is given. The Trainer's optimizer-factory constructor calls it for you.
void prepare_model(nn::Module& model, const PrecisionConfig& config);

// Puts the optimizer's state in the layout config asks for: with compact_state, packs the masters
// (Optimizer::pack_masters) and sets an Adam/AdamW's exp_avg_dtype to bf16 in every group; with a
// stochastic or Kahan weight_update, releases the bf16 masters (Optimizer::release_masters) and sets
// an Adam/AdamW's bf16_update, rounding_seed and both moment dtypes (bf16); nothing otherwise (mt::Error
// for a non-Adam optimizer with a non-master weight_update). Call it before training. The Trainer
// calls it.
void prepare_optimizer(optim::Optimizer& optimizer, const PrecisionConfig& config);

}  // namespace mixtrain::train
