// Kernel tables of the fused multi-tensor kernels behind the optimizers, gradient clipping and the
// grad scaler (CPU kernels in src/backends/cpu/kernels/optim_kernels.cpp and grad_scaler.cpp).
//
// These tables are keyed by device only: a list mixes dtypes, so every backend registers its one
// function under float32 and the front-ends below look it up there.
//
// A "multi-tensor" kernel takes a list of tensors, cuts every tensor into chunks of
// kMultiTensorChunk elements and runs all chunks of all tensors in one OpenMP region, so a model of
// many small parameters costs one parallel region per step instead of one per parameter. Every
// kernel is elementwise within a chunk, or reduces a chunk to a partial that is combined afterwards
// in chunk order, so results never depend on the thread count.
//
// Precision: 16-bit values are widened to fp32, all math is fp32 (moments and master weights are
// fp32 storage), and 16-bit outputs are rounded once, to nearest even.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <tuple>
#include <vector>

#include "core/field_count.h"

#include "kernels/dispatch.h"
#include "mixtrain/dtype.h"
#include "mixtrain/tensor.h"

namespace mixtrain::kernels {

inline constexpr int64_t kMultiTensorChunk = 16384;

// ---------------------------------------------------------------------------------------------
// Scale + non-finite check (the grad scaler's unscale, clip_grad_norm_'s scaling).

// Multiplies every element of every tensor by `factor` in place (fp32 math, rounded back to the
// tensor's dtype) and reports whether any element was inf or NaN *before* the multiply (16-bit values
// are widened to fp32 for the check). With factor == 1 nothing is written: a pure check.
// Tensors may have any strides (views such as g.t() or g[:, :5]) but must not overlap each other.
// dtypes: float32, float16, bfloat16, float64 (mixed in one list is fine).
// Returns the index of the first tensor (in list order) holding a non-finite value, or -1.
using ScaleAndCheckFn = int64_t(const std::vector<Tensor>& tensors, float factor);
MT_KERNEL_TABLE(DispatchTable<ScaleAndCheckFn>, scale_and_check_table, "multi-tensor scale and check");

// ---------------------------------------------------------------------------------------------
// Norms (clip_grad_norm_).

// For each tensor: sum of |x|^p (p > 0, finite) or max |x| (p = inf), accumulated in fp32 within
// chunks and combined over chunks in fp32, in chunk order. NaN propagates. Any strides.
using NormPartialsFn = std::vector<float>(const std::vector<Tensor>& tensors, double p);
MT_KERNEL_TABLE(DispatchTable<NormPartialsFn>, norm_partials_table, "multi-tensor norm");

// ---------------------------------------------------------------------------------------------
// Optimizer steps. Params and grads are contiguous and of one dtype per parameter (float32,
// float16 or bfloat16); the value being optimised is
//   - the fp32 `master` when it is defined (the param then receives it rounded to nearest even),
//   - else the packed master when `master_low` is defined (bf16 params only: fp32 bits =
//     param bits << 16 | low; both halves are written back, the param thus holds the truncation),
//   - else the param itself.
// Moment buffers are contiguous fp32, except Adam's exp_avg, which may be bf16.
// inv_scale multiplies each gradient as it is read (1 when the grads are already unscaled).

// The packed-master layout, element by element (the AVX-512 Adam kernel does the same 16 lanes at a
// time): the fp32 master's upper 16 bits are the bf16 parameter's bits, its lower 16 bits are kept
// in master_low.
inline float unpack_master(uint16_t param_bits, uint16_t low) {
  return std::bit_cast<float>((static_cast<uint32_t>(param_bits) << 16) | low);
}

struct PackedMaster {
  uint16_t param_bits, low;
};

inline PackedMaster pack_master(float master) {
  const auto bits = std::bit_cast<uint32_t>(master);
  return {static_cast<uint16_t>(bits >> 16), static_cast<uint16_t>(bits & 0xffffu)};
}

// fp32 -> bf16 bits with stochastic rounding: `r` is 16 uniformly random bits; the magnitude rounds
// up with probability (dropped low 16 bits) / 2^16, so the expected value of the result is f
// exactly (for finite f up to the largest bf16; beyond it rounding up gives inf, the next bf16 up).
// Exact bf16 values never change; NaN is quieted as by the round-to-nearest conversion; inf stays inf
// (its low bits are zero, so adding r cannot carry).
constexpr uint16_t bf16_bits_stochastic(float f, uint16_t r) {
  const auto u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + r) >> 16);  // sign-magnitude: r is added to the magnitude bits
}

// The Philox key of the stochastic rounding of one optimizer step: the run's seed and the
// parameter's step count mixed (splitmix64's finaliser), so every step draws fresh bits while a rerun
// with the same seed draws the same ones. Element e of the parameter with stream id s uses word e % 4
// of Philox block e / 4 under stream s: bits that depend on (seed, step, parameter, element) only,
// never on the thread count or the chunking.
constexpr uint64_t rounding_key(uint64_t seed, int64_t step) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(step) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct SgdHyper {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  float inv_scale = 1.0f;
};

// The tensors of one parameter's update are declared from one list (MT_*_TENSOR_MEMBERS), which also
// gives tensors(): every tensor member, for code that must see each one (the checked device's
// placement guard). Non-tensor members are counted in kOtherMembers, and a static_assert compares
// both with the compiler's count of members, so a member added outside the list fails the build.
#define MT_DECLARE_TENSOR_MEMBER(name) Tensor name;
#define MT_TENSOR_MEMBER_ADDRESS(name) &name,

// momentum_buffer: undefined when momentum == 0.
#define MT_SGD_TENSOR_MEMBERS(X) X(param) X(grad) X(master) X(master_low) X(momentum_buffer)

struct SgdTensors {
  MT_SGD_TENSOR_MEMBERS(MT_DECLARE_TENSOR_MEMBER)
  bool first_step = false;  // the buffer is initialised to the gradient
  static constexpr size_t kOtherMembers = 1;

  auto tensors() const { return std::array{MT_SGD_TENSOR_MEMBERS(MT_TENSOR_MEMBER_ADDRESS)}; }
};
static_assert(aggregate_field_count<SgdTensors>() ==
                  std::tuple_size_v<decltype(SgdTensors{}.tensors())> + SgdTensors::kOtherMembers,
              "a member of SgdTensors is missing from MT_SGD_TENSOR_MEMBERS or from kOtherMembers");

using SgdStepFn = void(const std::vector<SgdTensors>& tensors, const SgdHyper& h);
MT_KERNEL_TABLE(DispatchTable<SgdStepFn>, sgd_step_table, "sgd step");

struct AdamHyper {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool decoupled_weight_decay = false;  // AdamW
  bool amsgrad = false;
  float inv_scale = 1.0f;
  // bf16 parameters without a master (and without kahan_comp) are stored with stochastic rounding
  // instead of round-to-nearest. A bf16 exp_avg_sq is always stored with stochastic rounding.
  bool stochastic_rounding = false;
  uint64_t rounding_seed = 0;  // see rounding_key
};

// max_exp_avg_sq: only with amsgrad. kahan_comp: a bf16 parameter without a master keeps the bf16
// compensation of a Kahan-compensated update (what the parameter should hold beyond its value; added
// to the next update, the new rounding error kept).
#define MT_ADAM_TENSOR_MEMBERS(X) \
  X(param) X(grad) X(master) X(master_low) X(exp_avg) X(exp_avg_sq) X(max_exp_avg_sq) X(kahan_comp)

struct AdamTensors {
  MT_ADAM_TENSOR_MEMBERS(MT_DECLARE_TENSOR_MEMBER)
  int64_t step = 0;     // this parameter's step count, already incremented for this update
  uint32_t stream = 0;  // the parameter's Philox stream for stochastic rounding (its flat index)
  // The position of element 0 in that stream: 0, or a view's offset within the parameter it is part
  // of (a ZeRO-1 shard), so that an element draws the same bits sharded or not.
  int64_t first_element = 0;
  static constexpr size_t kOtherMembers = 3;

  auto tensors() const { return std::array{MT_ADAM_TENSOR_MEMBERS(MT_TENSOR_MEMBER_ADDRESS)}; }
};
static_assert(aggregate_field_count<AdamTensors>() ==
                  std::tuple_size_v<decltype(AdamTensors{}.tensors())> + AdamTensors::kOtherMembers,
              "a member of AdamTensors is missing from MT_ADAM_TENSOR_MEMBERS or from kOtherMembers");

// One pass over each element: every input is read once and every output written once, 16 lanes at a
// time when cpu::isa() (mixtrain/cpu.h) allows AVX-512, 8 with AVX2, else in blocks through fp32
// buffers. Every path performs the same IEEE operations in the same order (no FMA contraction; sqrt
// and division are correctly rounded), so they give the same bits. exp_avg_sq is fp32 or bf16; the
// stochastic and Kahan modes and a bf16 exp_avg_sq run in the block path.
using AdamStepFn = void(const std::vector<AdamTensors>& tensors, const AdamHyper& h);
MT_KERNEL_TABLE(DispatchTable<AdamStepFn>, adam_step_table, "adam step");

// The packed master of a bf16 parameter as a whole tensor: master (contiguous fp32) from param
// (contiguous bf16) and low (contiguous uint8 [numel, 2]), and back.
using UnpackMasterFn = void(const Tensor& param, const Tensor& low, const Tensor& master);
using PackMasterFn = void(const Tensor& master, const Tensor& param, const Tensor& low);
MT_KERNEL_TABLE(DispatchTable<UnpackMasterFn>, unpack_master_table, "unpack master");
MT_KERNEL_TABLE(DispatchTable<PackMasterFn>, pack_master_table, "pack master");

// ---------------------------------------------------------------------------------------------
// The grad scaler's kernels (PyTorch's _amp_foreach_non_finite_check_and_unscale_ and
// _amp_update_scale_): found_inf, inv_scale and scale are one-element float32 tensors and
// growth_tracker a one-element int32 tensor, all on the gradients' device; they are read and
// written there. unscale multiplies every gradient by inv_scale, sets found_inf to 1 when a
// gradient held inf or NaN, and returns the index of the first such gradient or -1.
using AmpUnscaleFn = int64_t(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale);
using AmpUpdateScaleFn = void(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                              double growth_factor, double backoff_factor, int64_t growth_interval);
MT_KERNEL_TABLE(DispatchTable<AmpUnscaleFn>, amp_unscale_table, "grad scaler unscale");
MT_KERNEL_TABLE(DispatchTable<AmpUpdateScaleFn>, amp_update_scale_table, "grad scaler update");

// ---- front-ends: the device of the first tensor picks the kernel (all must share it).
inline int64_t multi_tensor_scale_and_check(const std::vector<Tensor>& tensors, float factor) {
  if (tensors.empty()) return -1;
  return scale_and_check_table(tensors.front().device(), kFloat32)(tensors, factor);
}
inline std::vector<float> multi_tensor_norm_partials(const std::vector<Tensor>& tensors, double p) {
  if (tensors.empty()) return {};
  return norm_partials_table(tensors.front().device(), kFloat32)(tensors, p);
}
inline void sgd_step(const std::vector<SgdTensors>& tensors, const SgdHyper& h) {
  if (!tensors.empty()) sgd_step_table(tensors.front().param.device(), kFloat32)(tensors, h);
}
inline void adam_step(const std::vector<AdamTensors>& tensors, const AdamHyper& h) {
  if (!tensors.empty()) adam_step_table(tensors.front().param.device(), kFloat32)(tensors, h);
}

}  // namespace mixtrain::kernels
