// mixtrain/op_id.h: the identifiers of every op that autocast, the kernel tables and the explain
// mode talk about. Indexing tables by OpId (never by name string) keeps the per-call cost of
// autocast to one array load.
#pragma once

#include <cstdint>
#include <string_view>

namespace mixtrain {

// The one X-macro of the project: the op list. Add an op here, then give it a policy in
// src/amp/policy_table.cpp (unlisted ops run in their input dtype).
// clang-format off
#define MT_FORALL_OPS(_)                                                                           \
  _(add) _(sub) _(mul) _(div) _(neg) _(exp) _(log) _(sqrt) _(rsqrt) _(pow) _(tanh) _(sigmoid)     \
  _(relu) _(gelu) _(silu) _(clamp) _(where) _(masked_fill) _(sum) _(mean) _(max) _(amax)          \
  _(matmul) _(bmm) _(linear) _(softmax) _(log_softmax) _(layer_norm) _(cross_entropy) _(mse_loss) \
  _(binary_cross_entropy) _(binary_cross_entropy_with_logits) _(conv2d) _(max_pool2d)             \
  _(avg_pool2d) _(embedding) _(dropout) _(cat) _(stack) _(index_select)                           \
  _(scaled_dot_product_attention) _(qkv_attention) _(gelu_linear) _(batch_norm) _(nll_loss)
// clang-format on

enum class OpId : uint16_t {
#define MT_OP_ENUM(name) k_##name,
  MT_FORALL_OPS(MT_OP_ENUM)
#undef MT_OP_ENUM
      kCount
};

inline constexpr int kNumOps = static_cast<int>(OpId::kCount);

inline constexpr std::string_view kOpNames[] = {
#define MT_OP_NAME(name) #name,
    MT_FORALL_OPS(MT_OP_NAME)
#undef MT_OP_NAME
};
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == kNumOps);

constexpr std::string_view op_name(OpId op) { return kOpNames[static_cast<int>(op)]; }

}  // namespace mixtrain
