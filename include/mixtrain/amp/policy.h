// mixtrain/amp/policy.h: the autocast op policy table, inspectable and editable.
//
// One table per device type. The CPU's (also a kPrivateUse1 backend's) follows PyTorch's CUDA
// lists rather than its CPU lists, so that a model gets the same numerics on CPU and GPU:
//   lower precision: matmul, bmm, linear, conv2d, scaled_dot_product_attention, qkv_attention,
//                    gelu_linear
//   fp32:            exp, log, pow, sum, mean, softmax, log_softmax, layer_norm and every loss
//   promote:         add, sub, mul, div, where, cat, stack (widest input dtype wins)
//   unlisted:        everything else runs in its input dtype (relu, gelu, pooling, views, ...)
// binary_cross_entropy (on probabilities) is fp32 under bf16 autocast and refused under fp16
// autocast: its gradient is not representable in fp16; use binary_cross_entropy_with_logits.
//
// The CUDA table is PyTorch's CUDA lists for these ops: the same, except that `mean` is unlisted and
// binary_cross_entropy is refused in every 16-bit region (PyTorch bans it under CUDA autocast).
// Only floating, non-fp64 tensors on the region's device type are cast (PyTorch's eligibility).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mixtrain/device.h"
#include "mixtrain/dtype.h"
#include "mixtrain/op_id.h"

namespace mixtrain::amp {

enum class CastPolicy : uint8_t {
  kInputDtype,      // unlisted: run in the inputs' own dtypes
  kLowerPrecision,  // cast eligible inputs to the region's 16-bit dtype
  kFp32,            // cast eligible inputs to float32
  kPromote,         // cast eligible inputs to the widest eligible input dtype
};
std::string_view to_string(CastPolicy p);

struct Rule {
  CastPolicy policy = CastPolicy::kInputDtype;
  bool refuse_fp16 = false;      // throw under an fp16 region (binary_cross_entropy)
  std::string_view refuse_hint;  // what to use instead
  bool refuse_always = false;    // throw under any 16-bit region (binary_cross_entropy on CUDA)
};

// Identifies an op in the policy table: a built-in OpId or an id returned by register_op().
using PolicyId = int;
constexpr PolicyId policy_id(OpId op) { return static_cast<int>(op); }

class Policy {
 public:
  // The rule in force for `op` now: the innermost region override, else the global table of the
  // region's device type (the CPU's outside any region).
  static Rule get(PolicyId op);
  static Rule get(OpId op) { return get(policy_id(op)); }
  // The rule of `device_type`'s table for `op`, with its global override (no region's).
  static Rule get(PolicyId op, DeviceType device_type);
  static Rule get(OpId op, DeviceType device_type) { return get(policy_id(op), device_type); }
  // The built-in default for `op` on `device_type` (ignores overrides).
  static Rule default_rule(PolicyId op, DeviceType device_type = DeviceType::kCPU);
  // Changes the global rule of `op` (all threads, all later regions), on every device type or on one.
  static void set(PolicyId op, CastPolicy policy);
  static void set(OpId op, CastPolicy policy) { set(policy_id(op), policy); }
  static void set(PolicyId op, CastPolicy policy, DeviceType device_type);
  static void set(OpId op, CastPolicy policy, DeviceType device_type) { set(policy_id(op), policy, device_type); }
  // Restores every built-in rule and forgets global overrides (registered ops keep their default).
  static void reset();
  // Registers a user op with a default rule (on every device type); returns its id (call
  // autocast_inputs with it).
  // Registering an existing name returns the same id.
  static PolicyId register_op(std::string name, CastPolicy policy);
  static std::string name(PolicyId op);
  static int size();  // built-in ops + registered ops
};

// One op call as seen by autocast, recorded while explain mode is on.
struct ExplainRecord {
  std::string op;
  std::vector<DType> input_dtypes;  // eligible inputs, before casting
  DType chosen;                     // dtype the eligible inputs were cast to (or kept)
  CastPolicy policy;
  std::string source;  // "default", "global override" or "region override"
};

// While an ExplainGuard lives, every autocast decision on this thread is recorded.
class ExplainGuard {
 public:
  ExplainGuard();
  ~ExplainGuard();
  ExplainGuard(const ExplainGuard&) = delete;
  ExplainGuard& operator=(const ExplainGuard&) = delete;
  const std::vector<ExplainRecord>& records() const;
  // A table: one line per op call with its dtypes, the chosen dtype and the rule.
  std::string report() const;

 private:
  bool prev_;
};

}  // namespace mixtrain::amp
