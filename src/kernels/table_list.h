// Every kernel table of the registry, in one typed list: for_each_table (registry.cpp) walks it, and
// a backend that wraps another's kernels (the checked device, src/kernels/checked) instantiates one
// wrapper per table from it. A new table is added here once.
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
  visit_holder<copy_table>(v);
  visit_holder<fill_table>(v);
  visit_holder<round_through_table>(v);
  visit_holder<random_fill_table>(v);
  visit_holder<unary_forward_tables>(v);
  visit_holder<unary_backward_tables>(v);
  visit_holder<gelu_forward_backward_table>(v);
  visit_holder<binary_tables>(v);
  visit_holder<ternary_tables>(v);
  visit_holder<where_table>(v);
  visit_holder<masked_fill_table>(v);
  visit_holder<eq_table>(v);
  visit_holder<compare_scalar_tables>(v);
  visit_holder<reduce_tables>(v);
  visit_holder<argmax_table>(v);
  visit_holder<scatter_add_rows>(v);
  visit_holder<matmul_table>(v);
  visit_holder<matmul_fp32_route_table>(v);
  visit_holder<uses_fp32_route_table>(v);
  visit_holder<sum_rows_table>(v);
  visit_holder<sum_to_size_table>(v);
  visit_holder<conv2d_forward_table>(v);
  visit_holder<conv2d_backward_table>(v);
  visit_holder<softmax_fwd>(v);
  visit_holder<softmax_bwd>(v);
  visit_holder<attention_fwd>(v);
  visit_holder<attention_bwd>(v);
  visit_holder<layer_norm_fwd>(v);
  visit_holder<layer_norm_bwd>(v);
  visit_holder<max_pool2d_fwd>(v);
  visit_holder<max_pool2d_bwd>(v);
  visit_holder<avg_pool2d_fwd>(v);
  visit_holder<avg_pool2d_bwd>(v);
  visit_holder<dropout_fwd>(v);
  visit_holder<dropout_bwd>(v);
  visit_holder<batch_norm_stats>(v);
  visit_holder<batch_norm_forward>(v);
  visit_holder<batch_norm_backward>(v);
  visit_holder<batch_norm_update_stats>(v);
  visit_holder<class_loss_fwd>(v);
  visit_holder<class_loss_bwd>(v);
  visit_holder<pointwise_loss_fwd>(v);
  visit_holder<pointwise_loss_bwd>(v);
  visit_holder<scale_and_check_table>(v);
  visit_holder<norm_partials_table>(v);
  visit_holder<sgd_step_table>(v);
  visit_holder<adam_step_table>(v);
  visit_holder<unpack_master_table>(v);
  visit_holder<pack_master_table>(v);
  visit_holder<amp_unscale_table>(v);
  visit_holder<amp_update_scale_table>(v);
  visit_holder<find_bad_index_table>(v);
  visit_holder<gather_rows_table>(v);
  visit_holder<fp8_quantize_table>(v);
  visit_holder<fp8_dequantize_table>(v);
}

}  // namespace mixtrain::kernels
