// The autocast policy table: built-in defaults indexed by OpId, global overrides, registered user
// ops, and explain mode. See include/mixtrain/amp/policy.h for the rules and why.
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <unordered_map>

#include "amp/autocast_state.h"
#include "mixtrain/amp/policy.h"
#include "mixtrain/error.h"

namespace mixtrain::amp {
namespace {

constexpr std::string_view kBceHint =
    "binary_cross_entropy is unsafe to autocast to float16 (its gradient is not representable in fp16). "
    "Combine the sigmoid and the loss: use binary_cross_entropy_with_logits, which is safe to autocast";

// The built-in table. Anything not listed runs in its input dtype.
Rule builtin_rule(OpId op) {
  switch (op) {
    case OpId::k_matmul:
    case OpId::k_bmm:
    case OpId::k_linear:
    case OpId::k_conv2d:
    case OpId::k_scaled_dot_product_attention:
    case OpId::k_qkv_attention:
    case OpId::k_gelu_linear: return {CastPolicy::kLowerPrecision};
    case OpId::k_exp:
    case OpId::k_log:
    case OpId::k_pow:
    case OpId::k_rsqrt:
    case OpId::k_sum:
    case OpId::k_mean:
    case OpId::k_softmax:
    case OpId::k_log_softmax:
    case OpId::k_layer_norm:
    case OpId::k_cross_entropy:
    case OpId::k_nll_loss:
    case OpId::k_mse_loss:
    case OpId::k_binary_cross_entropy_with_logits: return {CastPolicy::kFp32};
    case OpId::k_binary_cross_entropy: return {CastPolicy::kFp32, true, kBceHint};
    case OpId::k_add:
    case OpId::k_sub:
    case OpId::k_mul:
    case OpId::k_div:
    case OpId::k_where:
    case OpId::k_cat:
    case OpId::k_stack: return {CastPolicy::kPromote};
    default: return {CastPolicy::kInputDtype};
  }
}

struct Table {
  std::shared_mutex mu;
  std::vector<Rule> defaults;                     // built-in + registered
  std::vector<std::optional<CastPolicy>> global;  // user overrides
  std::vector<std::string> names;
  std::unordered_map<std::string, PolicyId> by_name;

  Table() {
    for (int i = 0; i < kNumOps; ++i) {
      defaults.push_back(builtin_rule(static_cast<OpId>(i)));
      names.emplace_back(op_name(static_cast<OpId>(i)));
      by_name[names.back()] = i;
    }
    global.resize(defaults.size());
  }
};

Table& table() {
  static auto* t = new Table();  // leaked: used from thread-local destructors at exit
  return *t;
}

void check_id(const Table& t, PolicyId op) {
  MT_CHECK(op >= 0 && op < static_cast<int>(t.defaults.size()), "amp::Policy: unknown op id ", op, " (",
           t.defaults.size(), " ops known)");
}

}  // namespace

std::string_view policy_name(CastPolicy p) {
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
  Table& t = table();
  std::shared_lock lock(t.mu);
  check_id(t, op);
  Rule rule = t.defaults[op];
  // Innermost region override wins: scan from the back.
  for (auto it = s.overrides.rbegin(); it != s.overrides.rend(); ++it) {
    if (it->first == op) {
      rule.policy = it->second;
      return {rule, "region override"};
    }
  }
  if (t.global[op]) {
    rule.policy = *t.global[op];
    return {rule, "global override"};
  }
  return {rule, "default"};
}

}  // namespace detail

Rule Policy::get(PolicyId op) { return detail::resolve_rule(op).first; }

Rule Policy::default_rule(PolicyId op) {
  Table& t = table();
  std::shared_lock lock(t.mu);
  check_id(t, op);
  return t.defaults[op];
}

void Policy::set(PolicyId op, CastPolicy policy) {
  Table& t = table();
  std::unique_lock lock(t.mu);
  check_id(t, op);
  t.global[op] = policy;
}

void Policy::reset() {
  Table& t = table();
  std::unique_lock lock(t.mu);
  for (auto& g : t.global) g.reset();
}

PolicyId Policy::register_op(std::string name, CastPolicy policy) {
  Table& t = table();
  std::unique_lock lock(t.mu);
  if (auto it = t.by_name.find(name); it != t.by_name.end()) return it->second;
  PolicyId id = static_cast<PolicyId>(t.defaults.size());
  t.defaults.push_back({policy});
  t.global.emplace_back();
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
  return static_cast<int>(t.defaults.size());
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
    std::string chosen(name(r.chosen));
    chosen.resize(std::max<size_t>(chosen.size(), 10), ' ');
    os << op << ins << "-> " << chosen << policy_name(r.policy) << " (" << r.source << ")\n";
  }
  return os.str();
}

}  // namespace mixtrain::amp
