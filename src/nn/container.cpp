// Sequential: children named by position, run in order.
#include "mixtrain/nn/container.h"

#include <algorithm>
#include <string>
#include <vector>

#include "mixtrain/autograd.h"
#include "mixtrain/nn/checkpoint.h"

namespace mixtrain::nn {

Tensor Sequential::forward(const Tensor& x) {
  const auto& children = named_children();
  Tensor y = x;
  if (checkpoint_segments_ == 0 || !GradMode::is_enabled()) {
    for (const auto& [name, child] : children) y = (*child)(y);
    return y;
  }
  const size_t n = children.size();
  const size_t segments = std::min(n, static_cast<size_t>(checkpoint_segments_));
  size_t begin = 0;
  for (size_t s = 0; s < segments; ++s) {
    const size_t end = begin + n / segments + (s < n % segments ? 1 : 0);
    std::vector<std::shared_ptr<Module>> segment;
    for (size_t i = begin; i < end; ++i) segment.push_back(children[i].second);
    if (s + 1 < segments) {
      y = checkpoint(segment, y);
    } else {
      for (const auto& m : segment) y = (*m)(y);
    }
    begin = end;
  }
  return y;
}

void Sequential::set_checkpoint_segments(int64_t segments) {
  MT_CHECK(segments >= 0, "Sequential: checkpoint segments must be >= 0 (0 turns checkpointing off), got ", segments);
  checkpoint_segments_ = segments;
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
