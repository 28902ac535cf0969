// Sequential: children named by position, run in order.
#include "mixtrain/nn/container.h"

#include <string>

namespace mixtrain::nn {

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& [name, child] : named_children()) y = child->forward(y);
  return y;
}

void Sequential::append(std::shared_ptr<Module> module) { register_module(std::to_string(size()), std::move(module)); }

std::shared_ptr<Module> Sequential::operator[](size_t i) const {
  MT_CHECK(i < size(), "Sequential: index ", i, " is out of range for a Sequential of ", size(), " modules");
  return named_children()[i].second;
}

void Sequential::throw_wrong_type(size_t i) const {
  MT_FAIL("Sequential: module ", i, " is a ", (*this)[i]->type_name(), ", not the requested type");
}

}  // namespace mixtrain::nn
