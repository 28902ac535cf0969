// mixtrain/amp/fp8.h: FP8 training of Linear layers with delayed per-tensor scaling (Transformer
// Engine's recipe), emulated on the CPU.
//
//   {
//     mt::amp::Autocast autocast(mt::kCPU, mt::kBFloat16);  // everything else in bf16
//     mt::amp::Fp8Autocast fp8;                             // nn::Linear layers in FP8
//     loss = F::cross_entropy(model(x), y);
//   }
//   loss.backward();  // the FP8 layers' backward quantises the incoming gradients (E5M2)
//
// What an FP8 Linear computes (fp8_linear below): the input x and the weight W are quantised to
// E4M3 with their own scales, y = dq(q(x)) dq(q(W))^T + b with fp32 accumulation, rounded once to
// the output dtype. In backward the output gradient dY is quantised to E5M2 (E4M3 with the
// recipe's kAllE4M3 format), dX = dq(q(dY)) dq(q(W)), dW = dq(q(dY))^T dq(q(x)), both fp32 sums; the bias gradient is the sum of the unquantised dY. This is what an FP8 GEMM with scale
// factors and fp32 accumulation computes: on the CPU the "GEMM" is the fp32 GEMM of the exact
// dequantised values (each code's value times the inverse scale), so results match an FP8 tensor
// core up to the order of the fp32 sums. Saved for backward: the 1-byte codes of x and W.
//
// Scaling (delayed): each tensor role of a layer (input, weight, output gradient) keeps a history
// of the amax (max |value|) of its last amax_history_len tensors. A tensor is quantised as
// q = fp8(value * scale) with the scale computed *before* it was seen:
//     scale = fp8_max / reduce(history) / 2^margin,  reduce = max (default) or the most recent
// (fp8_max: 448 for E4M3, 57344 for E5M2), then its own amax joins the history for the next one.
// The first tensor of a role uses scale 1. Only forwards in grad mode record (evaluation and
// inference under NoGradGuard quantise with the current scales and leave them unchanged). The scale is kept unchanged when the reduced amax is 0
// (nothing seen yet but zeros) or the new scale would not be a finite positive fp32 number. A
// non-finite amax (an inf/NaN tensor: an overflowing fp16 step that a GradScaler will skip, or a
// diverged run) is not recorded, so one bad step does not freeze the scale for a whole history
// window. The cast saturates finite values at +-fp8_max (a value that outgrew a stale scale clips);
// inf and NaN stay non-finite (E4M3 has no inf: both become NaN) so that divergence and the
// GradScaler still see them.
//
// Differences from Transformer Engine, each deliberate: TE records non-finite amaxes (and then
// keeps the old scale while they are in the window); TE reduces the amax across data-parallel
// ranks, which mixtrain does not yet (each rank scales by its own history: the model replicas stay
// identical because weights are, and the weight scale depends only on the weights); TE caches the
// quantised weight across micro-batches, mixtrain quantises it at each forward.
//
// State: a Linear layer creates its Fp8LinearState on its first forward in an FP8 region (see
// nn::Linear, nn/linear.h); a layer built with LinearOptions::fp8 = false (GPT's output head)
// stays in the enclosing precision. Regions nest like Autocast; the state is per thread. Activation
// checkpointing refuses FP8 regions (its recomputation would quantise with a scale that changed
// since the forward). Devices: the quantisation kernels exist for the CPU (and devices that use the
// CPU's kernels); elsewhere fp8_linear throws an mt::Error naming the missing kernel.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "mixtrain/float8.h"
#include "mixtrain/tensor.h"

namespace mixtrain::amp {

struct Fp8Recipe {
  // kHybrid: E4M3 forward (inputs, weights), E5M2 output gradients (Transformer Engine's HYBRID).
  // kAllE4M3: E4M3 for all three (the format itself is Fp8Format::kE4M3, mixtrain/float8.h).
  enum class Format : uint8_t { kHybrid, kAllE4M3 };
  enum class AmaxCompute : uint8_t { kMax, kMostRecent };

  Format format = Format::kHybrid;
  int amax_history_len = 1024;  // 1 .. 65536 (Transformer Engine's default: 1024)
  int margin = 0;               // scale divided by 2^margin: headroom for growing values; 0 .. 32
  AmaxCompute amax_compute = AmaxCompute::kMax;

  // mt::Error naming the field when a value is out of range.
  void validate() const;
  Fp8Format forward_format() const { return Fp8Format::kE4M3; }
  Fp8Format backward_format() const { return format == Format::kHybrid ? Fp8Format::kE5M2 : Fp8Format::kE4M3; }
};

// "hybrid", "e4m3"; "max", "most_recent"; and their parsers (mt::Error listing the valid values).
std::string_view to_string(Fp8Recipe::Format format);
std::string_view to_string(Fp8Recipe::AmaxCompute compute);
Fp8Recipe::Format parse_fp8_format(std::string_view text);
Fp8Recipe::AmaxCompute parse_amax_compute(std::string_view text);

// The delayed scaling of one tensor role (see the top of this file).
class Fp8Scaling {
 public:
  float scale() const { return scale_; }
  float scale_inv() const { return scale_inv_; }
  // amaxes recorded, oldest first (at most the recipe's history length).
  const std::vector<float>& amax_history() const { return history_; }
  // Records the amax of the tensor just quantised with scale() (a non-finite one is dropped) and
  // computes the scale of the next quantisation for `format`.
  void update(float amax, const Fp8Recipe& recipe, Fp8Format format);
  // Puts back a saved state (checkpoints): scale must be finite and > 0, the history finite and >= 0.
  void restore(float scale, std::vector<float> amax_history);

 private:
  float scale_ = 1.0f;
  float scale_inv_ = 1.0f;
  std::vector<float> history_;
};

// The three roles of one Linear layer.
struct Fp8LinearState {
  Fp8Scaling input, weight, grad_output;
};

struct Fp8AutocastOptions {
  bool enabled = true;
  Fp8Recipe recipe = {};
};

// RAII: nn::Linear layers run as fp8_linear with `recipe` inside an enabled region. Nests; leaving
// restores the enclosing region's setting.
class Fp8Autocast {
 public:
  explicit Fp8Autocast(const Fp8AutocastOptions& options = {});
  ~Fp8Autocast();
  Fp8Autocast(const Fp8Autocast&) = delete;
  Fp8Autocast& operator=(const Fp8Autocast&) = delete;

 private:
  bool previous_enabled_;
  Fp8Recipe previous_recipe_;
};

// True inside an enabled Fp8Autocast region on this thread.
bool is_fp8_enabled();
// The recipe of the innermost enabled region (the default recipe outside one).
const Fp8Recipe& fp8_recipe();

// y = x W^T + b in FP8 as described at the top of this file.
//   x: [..., in] fp32, bf16 or fp16; w: [out, in] floating (fp32 parameters, or 16-bit ones);
//   b: [out] or undefined. Output [..., out]: the autocast dtype inside an enabled Autocast region
//   on x's device type, else x's dtype. Gradients: x's, w's and b's dtypes (fp32 sums, rounded once).
// `state`'s input and weight scalings are used and updated by this call, its grad_output scaling
// by the backward (which keeps `state` alive).
Tensor fp8_linear(const Tensor& x, const Tensor& w, const Tensor& b, const std::shared_ptr<Fp8LinearState>& state,
                  const Fp8Recipe& recipe);

}  // namespace mixtrain::amp
