// The Autocast guard, the cast cache and the op hook that applies the policy table.
// See Note [Autocast] in docs/amp.md for the rules this implements.
#include "mixtrain/amp/autocast.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "amp/autocast_state.h"
#include "core/backend.h"
#include "kernels/linalg.h"
#include "mixtrain/autograd.h"
#include "core/backend_descriptor.h"
#include "ops/autocast_hook.h"
#include "ops/round_through.h"

namespace mixtrain::amp {

namespace detail {
AutocastState& state() {
  thread_local AutocastState s;
  return s;
}
}  // namespace detail

namespace {

using detail::AutocastState;
using detail::state;

// How a cached weight was converted: cast to the region's dtype, or rounded to it in fp32 for the
// linear layers on the fp32 route (ops::autocast_linear).
enum class CastKind : uint8_t { kCast, kRoundedFp32 };

struct CastKey {
  const TensorImpl* source;
  CastKind kind;
  bool operator==(const CastKey&) const = default;
};

struct CastKeyHash {
  size_t operator()(const CastKey& k) const {
    return std::hash<const TensorImpl*>()(k.source) ^ static_cast<size_t>(k.kind);
  }
};

// Process-global cache of weight casts, keyed by the source TensorImpl and the kind of conversion.
// An entry remembers the source's storage version so that an in-place update of the weight inside a
// long region (an optimizer step, say) is not served stale.
struct CastCache {
  struct Entry {
    std::weak_ptr<TensorImpl> source;
    uint64_t version;
    Tensor cast;
  };
  std::mutex mu;
  std::unordered_map<CastKey, Entry, CastKeyHash> entries;
  CastCacheStats stats;
};

CastCache& cache() {
  static auto* c = new CastCache();
  return *c;
}

bool eligible(const Tensor& t, DeviceType device_type) {
  return t.defined() && is_floating(t.dtype()) && t.dtype() != kFloat64 && t.device().type == device_type;
}

// PyTorch caches only fp32 -> lower-precision casts of leaves that require grad (the weights).
// mixtrain also requires grad mode on, so a cast made under NoGradGuard (which has no graph) is never
// reused by a training forward.
bool cacheable(const Tensor& t, DType target, const AutocastState& s) {
  return s.cache_enabled && GradMode::is_enabled() && target == s.dtype && t.dtype() == kFloat32 &&
         t.requires_grad() && t.is_leaf();
}

// t converted to `target` the `kind` way: t.to(target), or ops::round_through(t, target).
Tensor convert(const Tensor& t, DType target, CastKind kind) {
  return kind == CastKind::kCast ? t.to(target) : ops::round_through(t, target);
}

Tensor cached_cast(const Tensor& t, DType target, const AutocastState& s, CastKind kind = CastKind::kCast) {
  if (t.dtype() == target) return t;
  if (!cacheable(t, target, s)) return convert(t, target, kind);
  CastCache& c = cache();
  std::lock_guard lock(c.mu);
  const CastKey key{t.impl_ptr().get(), kind};
  auto it = c.entries.find(key);
  if (it != c.entries.end() && !it->second.source.expired() && it->second.version == t.version()) {
    ++c.stats.hits;
    return it->second.cast;
  }
  ++c.stats.misses;
  Tensor out = convert(t, target, kind);
  c.entries[key] = {t.impl_ptr(), t.version(), out};
  return out;
}

DType promote_target(PolicyId op, std::span<Tensor* const> inputs, const AutocastState& s) {
  DType target = s.dtype;
  for (Tensor* t : inputs) {
    if (t == nullptr || !eligible(*t, s.device_type)) continue;
    if (t->dtype() == kFloat32) {
      target = kFloat32;
    } else {
      MT_CHECK(t->dtype() == s.dtype || target == kFloat32, "autocast: ", Policy::name(op),
               " (promote policy) got a ", t->dtype(), " input inside a ", s.dtype,
               " region; mixing float16 and bfloat16 is not supported, cast the input to one of them");
    }
  }
  return target;
}

// `roundable`: inputs that may be rounded in fp32 instead of cast (the linear layers' parameters;
// ops::autocast_linear); *any_rounded (when given) is set if one was.
DType apply_rule(PolicyId op, std::span<Tensor* const> inputs, std::span<Tensor* const> roundable = {},
                 bool* any_rounded = nullptr) {
  AutocastState& s = state();
  auto [rule, source] = detail::resolve_rule(op);
  MT_CHECK(!(rule.refuse_fp16 && s.dtype == kFloat16) && !rule.refuse_always, "autocast: ", Policy::name(op),
           " is refused in a ", s.dtype, " region on ", s.device_type, ". ", rule.refuse_hint);
  DType target = kFloat32;
  switch (rule.policy) {
    case CastPolicy::kLowerPrecision: target = s.dtype; break;
    case CastPolicy::kFp32: target = kFloat32; break;
    case CastPolicy::kPromote: target = promote_target(op, inputs, s); break;
    case CastPolicy::kInputDtype:  // nothing is cast; report the first eligible input's dtype
      for (Tensor* t : inputs) {
        if (t != nullptr && eligible(*t, s.device_type)) {
          target = t->dtype();
          break;
        }
      }
      break;
  }
  ExplainRecord* record = nullptr;
  if (s.explain != nullptr) {
    s.explain->push_back({Policy::name(op), {}, target, rule.policy, source});
    record = &s.explain->back();
  }
  for (Tensor* t : inputs) {
    if (t == nullptr || !eligible(*t, s.device_type)) continue;
    if (record) record->input_dtypes.push_back(t->dtype());
    if (rule.policy == CastPolicy::kInputDtype) continue;
    const bool round = target != kFloat32 && t->dtype() == kFloat32 &&
                       std::find(roundable.begin(), roundable.end(), t) != roundable.end() &&
                       kernels::uses_fp32_route(t->device(), target);
    *t = cached_cast(*t, target, s, round ? CastKind::kRoundedFp32 : CastKind::kCast);
    if (round && any_rounded) *any_rounded = true;
  }
  return target;
}

}  // namespace

struct Autocast::Saved {
  AutocastState previous;
};

// The device's descriptor says (PyTorch's defaults: float16 on CUDA, bfloat16 elsewhere); bfloat16 on
// a device type without one.
DType default_autocast_dtype(DeviceType device_type) {
  const BuiltinBackend* b = builtin_backend_of(device_type);
  return b != nullptr ? b->descriptor->autocast_dtype : kBFloat16;
}

Autocast::Autocast(DeviceType device_type, std::optional<DType> dtype, bool enabled) : saved_(nullptr) {
  enter({.device_type = device_type, .dtype = dtype, .enabled = enabled});
}

Autocast::Autocast(const AutocastOptions& options) : saved_(nullptr) { enter(options); }

void Autocast::enter(const AutocastOptions& o) {
  DType dtype = o.dtype.value_or(default_autocast_dtype(o.device_type));
  if (o.enabled) {
    MT_CHECK(device_count(o.device_type) > 0, "amp::Autocast: device type ", o.device_type, " is not available: ",
             device_unavailable_reason(o.device_type));
    MT_CHECK(dtype == kBFloat16 || dtype == kFloat16, "amp::Autocast: the autocast dtype must be bfloat16 or float16, got ",
             dtype, " (to run a region in fp32, construct it with enabled=false)");
  }
  detail::install_hook();
  AutocastState& s = state();
  saved_ = new Saved{s};
  saved_->previous.explain = nullptr;  // explain mode is owned by its guard, not restored
  s.enabled = o.enabled;
  s.device_type = o.device_type;
  s.dtype = dtype;
  if (o.cache_enabled) s.cache_enabled = *o.cache_enabled;
  s.overrides.insert(s.overrides.end(), o.overrides.begin(), o.overrides.end());
  ++s.nesting;
}

namespace {

// Leaves a region: the enclosing state comes back, one level less deep, with the explain mode of
// its own guard; the cast cache is dropped when no region is left.
void leave_region(AutocastState&& previous) {
  AutocastState& s = state();
  const int nesting = s.nesting - 1;
  auto* explain = s.explain;
  s = std::move(previous);
  s.nesting = nesting;
  s.explain = explain;
  if (nesting == 0) clear_autocast_cache();
}

}  // namespace

Autocast::~Autocast() {
  leave_region(std::move(saved_->previous));
  delete saved_;
}

struct AutocastSnapshot::State {
  AutocastState state;
};

AutocastSnapshot::AutocastSnapshot() : state_(std::make_shared<const State>(State{state()})) {}

struct RestoredAutocast::Saved {
  AutocastState previous;
  int suspension = 0;  // the ops' suspension depth, put back on exit
};

RestoredAutocast::RestoredAutocast(const AutocastSnapshot& snapshot) {
  detail::install_hook();
  AutocastState& s = state();
  saved_ = std::make_unique<Saved>(Saved{s, ops::autocast_suspension_depth()});
  const int nesting = s.nesting + 1;
  auto* explain = s.explain;
  s = snapshot.state_->state;
  s.nesting = nesting;  // a region of its own: its casts are cached until it ends
  ops::autocast_suspension_depth() = 0;
  s.explain = explain;  // explain mode belongs to its guard
}

RestoredAutocast::~RestoredAutocast() {
  ops::autocast_suspension_depth() = saved_->suspension;
  leave_region(std::move(saved_->previous));
}

bool is_autocast_enabled() { return state().enabled; }
DType get_autocast_dtype(DeviceType device_type) {
  const AutocastState& s = state();
  return s.enabled && s.device_type == device_type ? s.dtype : default_autocast_dtype(device_type);
}
bool is_autocast_cache_enabled() { return state().cache_enabled; }

CastCacheStats cast_cache_stats() {
  CastCache& c = cache();
  std::lock_guard lock(c.mu);
  CastCacheStats s = c.stats;
  s.entries = static_cast<int64_t>(c.entries.size());
  return s;
}

void reset_cast_cache_stats() {
  CastCache& c = cache();
  std::lock_guard lock(c.mu);
  c.stats = {};
}

void clear_autocast_cache() {
  CastCache& c = cache();
  std::unordered_map<CastKey, CastCache::Entry, CastKeyHash> dropped;
  {
    std::lock_guard lock(c.mu);
    dropped.swap(c.entries);
  }  // the casts are freed here, outside the lock
}

DType autocast_inputs(PolicyId op, std::initializer_list<Tensor*> inputs) {
  if (!ops::autocast_active()) {
    for (Tensor* t : inputs)
      if (t && t->defined()) return t->dtype();
    return kFloat32;
  }
  return apply_rule(op, std::span<Tensor* const>(inputs.begin(), inputs.size()));
}

}  // namespace mixtrain::amp

namespace mixtrain::amp {
namespace {

bool hook_active() {
  const auto& s = detail::state();
  return s.enabled && !autograd::in_backward();
}

void hook_cast_inputs(OpId op, std::span<Tensor* const> inputs) { apply_rule(policy_id(op), inputs); }

void hook_cast_linear(OpId op, Tensor& x, Tensor& w, Tensor& b, bool& params_rounded) {
  Tensor* const inputs[] = {&x, &w, &b};
  Tensor* const params[] = {&w, &b};
  const DType target = apply_rule(policy_id(op), inputs, params, &params_rounded);
  // Rounded parameters need a rounded weight (not a 16-bit one with only the bias rounded) and a
  // 16-bit input of the same precision (an ineligible x, fp64 say, keeps its dtype); otherwise the
  // op sees the casts it would have seen (and reports a mismatch if there is one).
  if (params_rounded && (w.dtype() != kFloat32 || x.dtype() != target)) {
    params_rounded = false;
    if (w.dtype() == kFloat32) w = w.to(target);
    if (b.defined() && b.dtype() == kFloat32) b = b.to(target);
  }
}

constexpr ops::AutocastHandlers kHandlers{&hook_active, &hook_cast_inputs, &hook_cast_linear};

}  // namespace

namespace detail {
void install_hook() { ops::install_autocast_handlers(&kHandlers); }
}  // namespace detail

}  // namespace mixtrain::amp
