// mixtrain/amp/autocast.h: the autocast region.
//
//   {
//     mt::amp::Autocast autocast(mt::kCPU, mt::kBFloat16);  // forward + loss only
//     loss = F::cross_entropy(model(x), y);
//   }
//   loss.backward();  // outside the region: backward runs in the dtypes the forward chose
//
// Inside an enabled region each op runs in the dtype its policy says (amp/policy.h). The casts are
// recorded by autograd before the op, so activations saved for backward are 16-bit and an fp32
// parameter receives an fp32 gradient. State is per thread; regions nest, and leaving a region
// restores the enclosing state. fp32 leaf tensors that require grad (the weights) are cast once per
// outermost region and the copies dropped when it exits; nothing is cached while grad mode is off
// (a copy cast under NoGradGuard has no graph and must not be reused by a later training forward),
// and an entry whose source was modified in place since is recast.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "mixtrain/amp/policy.h"
#include "mixtrain/device.h"
#include "mixtrain/dtype.h"
#include "mixtrain/tensor.h"

namespace mixtrain::amp {

struct AutocastOptions {
  DeviceType device_type = DeviceType::kCPU;
  std::optional<DType> dtype;  // default: bf16 on CPU, fp16 on CUDA
  bool enabled = true;
  std::optional<bool> cache_enabled;  // default: the enclosing region's setting (true at top level)
  // Rules that apply inside this region only (and regions nested in it), e.g.
  // {{policy_id(OpId::kSoftmax), CastPolicy::kLowerPrecision}}.
  std::vector<std::pair<PolicyId, CastPolicy>> overrides;
};

class Autocast {
 public:
  explicit Autocast(DeviceType device_type = DeviceType::kCPU, std::optional<DType> dtype = std::nullopt,
                    bool enabled = true);
  explicit Autocast(const AutocastOptions& options);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  void enter(const AutocastOptions& options);
  struct Saved;
  Saved* saved_;
};

// This thread's autocast state (region on or off, device type, dtype, cache setting, overrides),
// kept to run code later as it would have run here: activation checkpointing (nn/checkpoint.h)
// recomputes a forward pass during backward under the state of the original forward.
class AutocastSnapshot {
 public:
  AutocastSnapshot();  // the current state

 private:
  friend class RestoredAutocast;
  struct State;
  std::shared_ptr<const State> state_;
};

// RAII: this thread's autocast state becomes `snapshot` for the scope (replacing, not nesting into,
// the enclosing region's settings); the enclosing state comes back on exit. Casts cached inside
// the scope are dropped on exit when no region encloses it.
class RestoredAutocast {
 public:
  explicit RestoredAutocast(const AutocastSnapshot& snapshot);
  ~RestoredAutocast();
  RestoredAutocast(const RestoredAutocast&) = delete;
  RestoredAutocast& operator=(const RestoredAutocast&) = delete;

 private:
  struct Saved;
  std::unique_ptr<Saved> saved_;
};

// Current state of this thread.
bool is_autocast_enabled();
DType get_autocast_dtype(DeviceType device_type = DeviceType::kCPU);  // the region's, else the default
DType default_autocast_dtype(DeviceType device_type);
bool is_autocast_cache_enabled();

// The cast cache: hits and misses since the last reset, live entries, and a manual clear.
struct CastCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t entries = 0;
};
CastCacheStats cast_cache_stats();
void reset_cast_cache_stats();
void clear_autocast_cache();

// For user-defined ops: applies the rule of `op` to the inputs (casting the handles in place) and
// returns the dtype chosen. Registered via Policy::register_op. Outside a region it does nothing.
DType autocast_inputs(PolicyId op, std::initializer_list<Tensor*> inputs);

}  // namespace mixtrain::amp
