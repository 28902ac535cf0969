// The autocast policy table: built-in defaults indexed by OpId, global overrides, registered user
// ops, and explain mode. See include/mixtrain/amp/policy.h for the rules and why.
#include <array>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <unordered_map>

#include "core/backend_descriptor.h"
#include "amp/autocast_state.h"
#include "mixtrain/amp/policy.h"
#include "mixtrain/error.h"

namespace mixtrain::amp {
namespace {

constexpr std::string_view kBceHint =
    "binary_cross_entropy is unsafe to autocast to float16 (its gradient is not representable in fp16). "
    "Combine the sigmoid and the loss: use binary_cross_entropy_with_logits, which is safe to autocast";

constexpr std::string_view kBceBannedHint =
    "binary_cross_entropy is refused under CUDA autocast, as in PyTorch (its gradient is not representable in "
    "16 bits). Combine the sigmoid and the loss: use binary_cross_entropy_with_logits, which is safe to autocast";

// The built-in CPU table (also the default of a kPrivateUse1 backend). Anything not listed runs in
// its input dtype.
Rule builtin_cpu_rule(OpId op) {
  switch (op) {
    case OpId::kMatmul:
    case OpId::kBmm:
    case OpId::kLinear:
    case OpId::kConv2d:
    case OpId::kScaledDotProductAttention:
    case OpId::kQkvAttention:
    case OpId::kGeluLinear:
    case OpId::kLinearCrossEntropy: return {CastPolicy::kLowerPrecision};
    case OpId::kExp:
    case OpId::kLog:
    case OpId::kPow:
    case OpId::kRsqrt:
    case OpId::kSum:
    case OpId::kMean:
    case OpId::kSoftmax:
    case OpId::kLogSoftmax:
    case OpId::kLayerNorm:
    case OpId::kCrossEntropy:
    case OpId::kNllLoss:
    case OpId::kMseLoss:
    case OpId::kBinaryCrossEntropyWithLogits: return {CastPolicy::kFp32};
    case OpId::kBinaryCrossEntropy: return {CastPolicy::kFp32, true, kBceHint};
    case OpId::kAdd:
    case OpId::kSub:
    case OpId::kMul:
    case OpId::kDiv:
    case OpId::kWhere:
    case OpId::kCat:
    case OpId::kStack: return {CastPolicy::kPromote};
    default: return {CastPolicy::kInputDtype};
  }
}

// The built-in CUDA table: PyTorch's CUDA autocast lists for the ops mixtrain has. It differs from
// the CPU table where PyTorch's CUDA lists do: `mean` is unlisted (runs in its input dtype, the kernel
// accumulating in fp32), and binary_cross_entropy is banned in every 16-bit region.
Rule builtin_cuda_rule(OpId op) {
  switch (op) {
    case OpId::kMean: return {CastPolicy::kInputDtype};
    case OpId::kBinaryCrossEntropy: return {CastPolicy::kFp32, true, kBceBannedHint, true};
    default: return builtin_cpu_rule(op);
  }
}

Rule builtin_rule(OpId op, DeviceType device) {
  // The op list of the device's descriptor; the CPU's for a device type without one.
  const BuiltinBackend* b = builtin_backend_of(device);
  return b != nullptr && b->descriptor->autocast_ops == AutocastOpList::kCuda ? builtin_cuda_rule(op)
                                                                              : builtin_cpu_rule(op);
}

// One policy table per device type: defaults and global overrides are per device; op names and
// ids are shared (a registered op has the same id, and the same default, on every device type).
struct Table {
  std::shared_mutex mu;
  std::array<std::vector<Rule>, kNumDeviceTypes> defaults;                     // built-in + registered
  std::array<std::vector<std::optional<CastPolicy>>, kNumDeviceTypes> global;  // user overrides
  std::vector<std::string> names;
  std::unordered_map<std::string, PolicyId> by_name;

  Table() {
    for (int i = 0; i < kNumOps; ++i) {
      for (int d = 0; d < kNumDeviceTypes; ++d)
        defaults[d].push_back(builtin_rule(static_cast<OpId>(i), static_cast<DeviceType>(d)));
      names.emplace_back(to_string(static_cast<OpId>(i)));
      by_name[names.back()] = i;
    }
    for (int d = 0; d < kNumDeviceTypes; ++d) global[d].resize(names.size());
  }
};

Table& table() {
  static auto* t = new Table();  // leaked: used from thread-local destructors at exit
  return *t;
}

void check_id(const Table& t, PolicyId op) {
  MT_CHECK(op >= 0 && op < static_cast<int>(t.names.size()), "amp::Policy: unknown op id ", op, " (",
           t.names.size(), " ops known)");
}

}  // namespace

std::string_view to_string(CastPolicy p) {
  switch (p) {
    case CastPolicy::kInputDtype: return "input_dtype";
    case CastPolicy::kLowerPrecision: return "lower_precision";
    case CastPolicy::kFp32: return "fp32";
    case CastPolicy::kPromote: return "promote";
  }
  return "?";
}

namespace detail {

std::pair<Rule, const char*> resolve_rule(PolicyId op) {
  const AutocastState& s = state();
  const int d = static_cast<int>(s.device_type);
  Table& t = table();
  std::shared_lock lock(t.mu);
  check_id(t, op);
  Rule rule = t.defaults[d][op];
  // Innermost region override wins: scan from the back.
  for (auto it = s.overrides.rbegin(); it != s.overrides.rend(); ++it) {
    if (it->first == op) {
      rule.policy = it->second;
      return {rule, "region override"};
    }
  }
  if (t.global[d][op]) {
    rule.policy = *t.global[d][op];
    return {rule, "global override"};
  }
  return {rule, "default"};
}

}  // namespace detail

Rule Policy::get(PolicyId op) { return detail::resolve_rule(op).first; }

Rule Policy::get(PolicyId op, DeviceType device_type) {
  Table& t = table();
  std::shared_lock lock(t.mu);
  check_id(t, op);
  const int d = static_cast<int>(device_type);
  Rule rule = t.defaults[d][op];
  if (t.global[d][op]) rule.policy = *t.global[d][op];
  return rule;
}

Rule Policy::default_rule(PolicyId op, DeviceType device_type) {
  Table& t = table();
  std::shared_lock lock(t.mu);
  check_id(t, op);
  return t.defaults[static_cast<int>(device_type)][op];
}

void Policy::set(PolicyId op, CastPolicy policy) {
  for (int d = 0; d < kNumDeviceTypes; ++d) set(op, policy, static_cast<DeviceType>(d));
}

void Policy::set(PolicyId op, CastPolicy policy, DeviceType device_type) {
  Table& t = table();
  std::unique_lock lock(t.mu);
  check_id(t, op);
  t.global[static_cast<int>(device_type)][op] = policy;
}

void Policy::reset() {
  Table& t = table();
  std::unique_lock lock(t.mu);
  for (auto& per_device : t.global)
    for (auto& g : per_device) g.reset();
}

PolicyId Policy::register_op(std::string name, CastPolicy policy) {
  Table& t = table();
  std::unique_lock lock(t.mu);
  if (auto it = t.by_name.find(name); it != t.by_name.end()) return it->second;
  PolicyId id = static_cast<PolicyId>(t.names.size());
  for (int d = 0; d < kNumDeviceTypes; ++d) {
    t.defaults[d].push_back({policy});
    t.global[d].emplace_back();
  }
  t.names.push_back(name);
  t.by_name[std::move(name)] = id;
  return id;
}

std::string Policy::name(PolicyId op) {
  Table& t = table();
  std::shared_lock lock(t.mu);
  check_id(t, op);
  return t.names[op];
}

int Policy::size() {
  Table& t = table();
  std::shared_lock lock(t.mu);
  return static_cast<int>(t.names.size());
}

ExplainGuard::ExplainGuard() : prev_(detail::state().explain != nullptr) {
  MT_CHECK(!prev_, "amp::ExplainGuard: explain mode is already on in this thread");
  detail::state().explain = new std::vector<ExplainRecord>();
}

ExplainGuard::~ExplainGuard() {
  delete detail::state().explain;
  detail::state().explain = nullptr;
}

const std::vector<ExplainRecord>& ExplainGuard::records() const { return *detail::state().explain; }

std::string ExplainGuard::report() const {
  std::ostringstream os;
  os << "op                              inputs                    -> dtype     rule\n";
  for (const ExplainRecord& r : records()) {
    std::ostringstream in;
    for (size_t i = 0; i < r.input_dtypes.size(); ++i) in << (i ? "," : "") << r.input_dtypes[i];
    std::string op = r.op, ins = in.str();
    op.resize(std::max<size_t>(op.size(), 32), ' ');
    ins.resize(std::max<size_t>(ins.size(), 26), ' ');
    std::string chosen(to_string(r.chosen));
    chosen.resize(std::max<size_t>(chosen.size(), 10), ' ');
    os << op << ins << "-> " << chosen << to_string(r.policy) << " (" << r.source << ")\n";
  }
  return os.str();
}

}  // namespace mixtrain::amp
