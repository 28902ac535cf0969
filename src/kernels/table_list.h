// Every kernel table of the registry, in one typed list: for_each_table (registry.cpp) walks it, and
// a backend that wraps another's kernels (the checked device, src/backends/checked/kernels)
// instantiates one wrapper per table from it. The list is generated from the tables' declarations
// (MT_KERNEL_TABLE, kernels/dispatch.h): a new table is written once, where it is declared.
//
// visit_tables(v) calls v.template operator()<Holder, I>() for each table, where Holder is the table
// itself (I = 0) or an array of tables (I = its index); table_at<Holder, I>() is the table.
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "kernels/conv.h"
#include "kernels/copy.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise.h"
#include "kernels/fp8.h"
#include "kernels/linalg.h"
#include "kernels/loss.h"
#include "kernels/nn.h"
#include "kernels/nn_batch_norm.h"
#include "kernels/optim.h"
#include "kernels/reduce.h"
#include "kernels/shape_ops.h"

namespace mixtrain::kernels {

namespace table_list_detail {
template <typename H>
struct Element {
  using type = H;
  static constexpr size_t count = 1;
};
template <typename T, size_t N>
struct Element<std::array<T, N>> {
  using type = T;
  static constexpr size_t count = N;
};
template <auto& Holder>
using holder_t = std::remove_cvref_t<decltype(Holder)>;
}  // namespace table_list_detail

// The table type (DispatchTable<Fn>) a holder holds.
template <auto& Holder>
using table_t = typename table_list_detail::Element<table_list_detail::holder_t<Holder>>::type;

template <auto& Holder, size_t I>
constexpr table_t<Holder>& table_at() {
  if constexpr (table_list_detail::Element<table_list_detail::holder_t<Holder>>::count == 1) return Holder;
  else return Holder[I];
}

template <auto& Holder, typename V>
void visit_holder(V& v) {
  constexpr size_t n = table_list_detail::Element<table_list_detail::holder_t<Holder>>::count;
  [&]<size_t... I>(std::index_sequence<I...>) { (v.template operator()<Holder, I>(), ...); }(
      std::make_index_sequence<n>{});
}

template <typename V>
void visit_tables(V&& v) {
#define MT_LISTED_KERNEL_TABLE(name) visit_holder<name>(v);
#include "kernels/table_list.inc"  // generated: one line per MT_KERNEL_TABLE (cmake/KernelTables.cmake)
#undef MT_LISTED_KERNEL_TABLE
}

}  // namespace mixtrain::kernels
