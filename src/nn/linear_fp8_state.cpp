// nn::Linear's FP8 scaling state as module extra state (linear.h): what a training checkpoint keeps
// of each FP8 layer so that a resumed run follows the uninterrupted one bit for bit.
#include <array>
#include <string>
#include <vector>

#include "mixtrain/error.h"
#include "mixtrain/factory.h"
#include "mixtrain/nn/linear.h"

namespace mixtrain::nn {

namespace {

constexpr std::array<const char*, 3> kRoles = {"input", "weight", "grad_output"};
constexpr int64_t kMaxHistory = 65536;

amp::Fp8Scaling& role_of(amp::Fp8LinearState& s, size_t role) {
  return role == 0 ? s.input : role == 1 ? s.weight : s.grad_output;
}
const amp::Fp8Scaling& role_of(const amp::Fp8LinearState& s, size_t role) {
  return role == 0 ? s.input : role == 1 ? s.weight : s.grad_output;
}

// The state in `dict`, validated whole; nullptr when there is none and none is required. Messages
// name the keys as `prefix` + key.
std::shared_ptr<amp::Fp8LinearState> parse(const StateDict& dict, bool required, const std::string& prefix) {
  for (const auto& [key, t] : dict) {
    bool known = false;
    for (const char* role : kRoles)
      known = known || key == std::string(role) + ".scale" || key == std::string(role) + ".amax_history";
    MT_CHECK(known, "unexpected FP8 tensor ", mixtrain::detail::quote_untrusted(prefix + key),
             " (expected {input,weight,grad_output}.{scale,amax_history})");
  }
  if (dict.size() == 0 && !required) return nullptr;
  auto state = std::make_shared<amp::Fp8LinearState>();
  for (size_t r = 0; r < kRoles.size(); ++r) {
    const std::string scale_key = std::string(kRoles[r]) + ".scale";
    const std::string history_key = std::string(kRoles[r]) + ".amax_history";
    const Tensor* scale = dict.find(scale_key);
    const Tensor* history = dict.find(history_key);
    for (const auto& [key, t] : {std::pair{scale_key, scale}, std::pair{history_key, history}})
      MT_CHECK(t != nullptr, "tensor '", prefix + key, "' is missing: the FP8 state is incomplete (a fresh scale would ",
               "silently change the trajectory)");
    MT_CHECK(scale->dtype() == kFloat32 && scale->dim() == 1 && scale->numel() == 1, "FP8 tensor '", prefix + scale_key,
             "' must be float32 [1], got ", describe(*scale));
    MT_CHECK(history->dtype() == kFloat32 && history->dim() == 1 && history->numel() <= kMaxHistory, "FP8 tensor '",
             prefix + history_key, "' must be float32 [0..", kMaxHistory, "], got ", describe(*history));
    try {
      role_of(*state, r).restore(scale->to(kCPU).to_vector<float>()[0], history->to(kCPU).to_vector<float>());
    } catch (const Error& e) {
      MT_FAIL("FP8 state (", prefix, kRoles[r], "): ", e.what());
    }
  }
  return state;
}

}  // namespace

StateDict Linear::extra_state() const {
  StateDict out;
  if (!fp8_state_) return out;
  for (size_t r = 0; r < kRoles.size(); ++r) {
    const amp::Fp8Scaling& s = role_of(*fp8_state_, r);
    out.insert(std::string(kRoles[r]) + ".scale", from_vector(std::vector<float>{s.scale()}, {1}, {.device = Device{}}));
    const std::vector<float>& h = s.amax_history();
    out.insert(std::string(kRoles[r]) + ".amax_history",
               from_vector(h, {static_cast<int64_t>(h.size())}, {.device = Device{}}));
  }
  return out;
}

void Linear::check_extra_state(const StateDict& state, bool after_fp8_steps, const std::string& key_prefix) const {
  parse(state, after_fp8_steps && fp8_, key_prefix);
}

void Linear::load_extra_state(const StateDict& state, bool after_fp8_steps) {
  fp8_state_ = parse(state, after_fp8_steps && fp8_, "");
}

}  // namespace mixtrain::nn
