// NonFiniteOrigin: an op observer (Note [Op observers]) that keeps the first op producing inf/NaN
// from finite inputs.
#include "mixtrain/nn/nonfinite_origin.h"

#include <cmath>
#include <sstream>

#include "mixtrain/ops/reduce.h"
#include "mixtrain/factory.h"

namespace mixtrain::nn {

struct NonFiniteOrigin::State {
  std::mutex mutex;
  int64_t step = 0;
  std::optional<NonFiniteOriginReport> report;
};

namespace {

// The floating-point tensors of a list, with their positions.
std::vector<std::pair<size_t, Tensor>> floating(const autograd::TensorList& list) {
  std::vector<std::pair<size_t, Tensor>> out;
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].defined() && list[i].is_floating_point() && list[i].numel() > 0) out.emplace_back(i, list[i]);
  return out;
}

// The index (in `ts`) of the first tensor holding inf or NaN, or -1: one read-only pass that leaves
// the tensors' versions alone (they may be saved for backward).
int64_t first_nonfinite(const std::vector<std::pair<size_t, Tensor>>& ts) {
  if (ts.empty()) return -1;
  std::vector<Tensor> list;
  for (const auto& [i, t] : ts) list.push_back(t);
  const Device device = list.front().device();
  for (const Tensor& t : list)
    if (t.device() != device) return -1;  // mixed devices: not an op's outputs; nothing to judge
  return first_non_finite(list);
}

// The first non-finite element of t: its flat index and value.
std::pair<int64_t, double> first_bad_element(const Tensor& t) {
  const std::vector<double> v = t.detach().to(kFloat64).to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) return {static_cast<int64_t>(i), v[i]};
  return {-1, 0.0};
}

std::vector<std::string> describe_all(const autograd::TensorList& list) {
  std::vector<std::string> out;
  for (const Tensor& t : list) out.push_back(t.defined() ? describe(t) : "undefined");
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& e : v) s += (s.empty() ? "" : ", ") + e;
  return s;
}

}  // namespace

std::string NonFiniteOriginReport::to_string() const {
  std::ostringstream os;
  const std::string where = scope.empty() ? "outside any named module" : "in module '" + scope + "'";
  std::ostringstream val;  // NaN without the sign a printf-style "-nan" would show
  if (std::isnan(value))
    val << "NaN";
  else
    val << value;
  if (leaf_input) {
    os << "step " << step << ": the first non-finite value is in a leaf tensor (data, parameter or buffer): input "
       << index << " of '" << op << "' " << where << " holds " << val.str() << " at element " << element
       << "; inputs: " << join(inputs);
    return os.str();
  }
  os << "step " << step << ": the " << (backward ? "backward" : "forward") << " of '" << op << "' " << where
     << " produced " << val.str() << " (" << (backward ? "gradient " : "output ") << index << ", element " << element
     << ") from finite " << (backward ? "incoming gradients" : "inputs") << "; "
     << (backward ? "incoming gradients: " : "inputs: ") << join(inputs) << "; "
     << (backward ? "gradients out: " : "outputs: ") << join(outputs);
  return os.str();
}

NonFiniteOrigin::NonFiniteOrigin(Module& model) : state_(std::make_shared<State>()) {
  model.set_scope_names();
  std::weak_ptr<State> weak = state_;
  observer_id_ = autograd::add_op_observer([weak](const autograd::OpEvent& e) {
    std::shared_ptr<State> s = weak.lock();
    if (!s) return;
    std::lock_guard<std::mutex> lock(s->mutex);
    if (s->report) return;
    const auto outs = floating(e.outputs), ins = floating(e.inputs);
    const int64_t bad_out = first_nonfinite(outs);
    if (bad_out < 0) return;
    const int64_t bad_in = first_nonfinite(ins);
    NonFiniteOriginReport r;
    r.step = s->step;
    r.op = e.op;
    r.backward = e.backward;
    r.scope = e.scope;
    r.inputs = describe_all(e.inputs);
    r.outputs = describe_all(e.outputs);
    if (bad_in >= 0) {
      // Produced upstream: only a leaf read by a forward op is an origin (an op's output was judged
      // when that op ran).
      const Tensor& in = ins[static_cast<size_t>(bad_in)].second;
      if (e.backward || !in.is_leaf()) return;
      r.leaf_input = true;
      r.index = static_cast<int64_t>(ins[static_cast<size_t>(bad_in)].first);
      std::tie(r.element, r.value) = first_bad_element(in);
    } else {
      r.index = static_cast<int64_t>(outs[static_cast<size_t>(bad_out)].first);
      std::tie(r.element, r.value) = first_bad_element(outs[static_cast<size_t>(bad_out)].second);
    }
    s->report = std::move(r);
  });
}

NonFiniteOrigin::~NonFiniteOrigin() { autograd::remove_op_observer(observer_id_); }

void NonFiniteOrigin::begin_step(int64_t step) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->step = step;
  state_->report.reset();
}

bool NonFiniteOrigin::found() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->report.has_value();
}

std::optional<NonFiniteOriginReport> NonFiniteOrigin::report() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->report;
}

}  // namespace mixtrain::nn
