// mixtrain/nn/container.h: Sequential.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixtrain/nn/module.h"

namespace mixtrain::nn {

namespace detail {
template <typename T>
struct is_module_ptr : std::false_type {};
template <typename M>
struct is_module_ptr<std::shared_ptr<M>> : std::bool_constant<std::derived_from<M, Module>> {};

// A module value (moved or shallow-copied into a new shared_ptr) or a shared_ptr to one.
template <typename T>
concept ModuleOrPtr = ModuleType<T> || is_module_ptr<std::remove_cvref_t<T>>::value;

template <ModuleOrPtr T>
std::shared_ptr<Module> to_module_ptr(T&& m) {
  if constexpr (is_module_ptr<std::remove_cvref_t<T>>::value) {
    return std::static_pointer_cast<Module>(std::forward<T>(m));
  } else {
    return std::make_shared<std::remove_cvref_t<T>>(std::forward<T>(m));
  }
}
}  // namespace detail

// Runs its children in order, each on the previous one's output. Children are named "0", "1", ...
// (PyTorch's nn.Sequential), so state_dict keys are "0.weight", "3.bias", ...
//
// With checkpoint segments (set_checkpoint_segments(s), s >= 1) the children are split into s
// consecutive segments of n / s children (the first n % s segments one more) and, while grad mode
// is on, every segment but the last runs under nn::checkpoint (nn/checkpoint.h): its activations
// are recomputed during backward instead of kept. The last segment runs plainly, since its
// backward comes first and would recompute at once (PyTorch's checkpoint_sequential does the same).
//
//   mt::nn::Sequential model(mt::nn::Flatten(), mt::nn::Linear(784, 10));
//   model.push_back(mt::nn::ReLU());
//   auto first = model.at<mt::nn::Flatten>(0);
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  // Not a copy constructor: one argument that is itself a Sequential copies it (shallow) instead.
  template <detail::ModuleOrPtr... Ms>
  requires(sizeof...(Ms) > 0 && !(sizeof...(Ms) == 1 && (std::is_same_v<std::remove_cvref_t<Ms>, Sequential> &&
                                                         ...))) explicit Sequential(Ms&&... modules)
      : Module("Sequential") {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  Tensor forward(const Tensor& x) override;

  template <detail::ModuleOrPtr M>
  void push_back(M&& module) {
    append(detail::to_module_ptr(std::forward<M>(module)));
  }

  size_t size() const { return named_children().size(); }
  bool empty() const { return size() == 0; }
  // 0 (the default): no checkpointing; s > size() is treated as size() (one child per segment).
  void set_checkpoint_segments(int64_t segments);
  int64_t checkpoint_segments() const { return checkpoint_segments_; }
  // The i-th child; throws mt::Error when out of range.
  std::shared_ptr<Module> operator[](size_t i) const;
  // The i-th child as M; throws mt::Error when out of range or of another type.
  template <ModuleType M>
  std::shared_ptr<M> at(size_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    if (m == nullptr) throw_wrong_type(i);
    return m;
  }

 private:
  void append(std::shared_ptr<Module> module);
  [[noreturn]] void throw_wrong_type(size_t i) const;

  int64_t checkpoint_segments_ = 0;
};

}  // namespace mixtrain::nn
