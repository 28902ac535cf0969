// mixtrain/op_id.h: the identifiers of every op that autocast, the kernel tables and the explain
// mode talk about. Indexing tables by OpId (never by name string) keeps the per-call cost of
// autocast to one array load.
#pragma once

#include <cstdint>
#include <string_view>

namespace mixtrain {

// The list of ops that autocast and the op observers know, as (enumerator, name): OpId and the op
// names are generated from it. Add an op here, then give it a policy in src/amp/policy_table.cpp
// (unlisted ops run in their input dtype). (The unary kernels have their own list,
// MT_FORALL_UNARY_KERNELS in src/kernels/elementwise.h: kernels, not ops.)
// clang-format off
#define MT_FORALL_OPS(_) \
  _(kAdd, add) _(kSub, sub) _(kMul, mul) _(kDiv, div) _(kNeg, neg) _(kExp, exp) _(kLog, log)         \
  _(kSqrt, sqrt) _(kRsqrt, rsqrt) _(kPow, pow) _(kTanh, tanh) _(kSigmoid, sigmoid) _(kRelu, relu)    \
  _(kGelu, gelu) _(kSilu, silu) _(kClamp, clamp) _(kWhere, where) _(kMaskedFill, masked_fill)        \
  _(kSum, sum) _(kMean, mean) _(kMax, max) _(kAmax, amax) _(kMatmul, matmul) _(kBmm, bmm)            \
  _(kLinear, linear) _(kSoftmax, softmax) _(kLogSoftmax, log_softmax) _(kLayerNorm, layer_norm)      \
  _(kCrossEntropy, cross_entropy) _(kMseLoss, mse_loss)                                              \
  _(kBinaryCrossEntropy, binary_cross_entropy)                                                       \
  _(kBinaryCrossEntropyWithLogits, binary_cross_entropy_with_logits) _(kConv2d, conv2d)              \
  _(kMaxPool2d, max_pool2d) _(kAvgPool2d, avg_pool2d) _(kEmbedding, embedding) _(kDropout, dropout)  \
  _(kCat, cat) _(kStack, stack) _(kIndexSelect, index_select)                                        \
  _(kScaledDotProductAttention, scaled_dot_product_attention) _(kQkvAttention, qkv_attention)        \
  _(kGeluLinear, gelu_linear) _(kBatchNorm, batch_norm) _(kNllLoss, nll_loss)                      \
  _(kLinearCrossEntropy, linear_cross_entropy)
// clang-format on

enum class OpId : uint16_t {
#define MT_OP_ENUM(id, name) id,
  MT_FORALL_OPS(MT_OP_ENUM)
#undef MT_OP_ENUM
      kCount
};

inline constexpr int kNumOps = static_cast<int>(OpId::kCount);

inline constexpr std::string_view kOpNames[] = {
#define MT_OP_NAME(id, name) #name,
    MT_FORALL_OPS(MT_OP_NAME)
#undef MT_OP_NAME
};
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == kNumOps);

constexpr std::string_view to_string(OpId op) { return kOpNames[static_cast<int>(op)]; }

}  // namespace mixtrain
