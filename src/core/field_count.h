// aggregate_field_count<T>(): how many members an aggregate T has, counted by the compiler (the
// longest braced list T{...} accepts). A struct whose members are also listed elsewhere -- for code
// that must see each of them, like the checked device's placement guard over an optimizer's tensors
// (kernels/optim.h) -- static_asserts that the list and the count agree, so a member added to the
// struct and not to the list fails the build instead of escaping whatever the list is for.
#pragma once

#include <cstddef>

namespace mixtrain {
namespace detail {
// Converts to any member type (never called: only asked about in a requires-expression).
struct AnyField {
  template <typename T>
  operator T&() const&&;
};
template <typename T, typename... Fields>
constexpr std::size_t aggregate_field_count_from() {
  if constexpr (requires { T{Fields{}..., AnyField{}}; }) {
    return aggregate_field_count_from<T, Fields..., AnyField>();
  } else {
    return sizeof...(Fields);
  }
}
}  // namespace detail

// T must be an aggregate whose members are not themselves aggregates (their braces would be elided).
template <typename T>
constexpr std::size_t aggregate_field_count() {
  return detail::aggregate_field_count_from<T>();
}

}  // namespace mixtrain
