// LayerNorm and BatchNorm2d modules (the batch_norm op itself is in src/ops/nn_batch_norm.cpp).
#include "mixtrain/nn/normalization.h"

#include "mixtrain/autograd.h"
#include "mixtrain/factory.h"
#include "mixtrain/nn/batch_norm.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/nn/init.h"

namespace mixtrain::nn {

using mixtrain::detail::concat;

// ---------------------------------------------------------------------------------------------
// LayerNorm

LayerNorm::LayerNorm(Shape normalized_shape, LayerNormOptions opts)
    : Module("LayerNorm"), normalized_shape_(normalized_shape), opts_(opts) {
  MT_CHECK(!normalized_shape.empty(), "LayerNorm: normalized_shape must have at least one dim");
  for (int64_t d : normalized_shape)
    MT_CHECK(d > 0, "LayerNorm: normalized_shape must be positive, got ", normalized_shape);
  MT_CHECK(opts.eps >= 0, "LayerNorm: eps must be non-negative, got ", opts.eps);
  if (opts.elementwise_affine) {
    weight_ = register_parameter("weight", ones(normalized_shape));
    if (opts.bias) bias_ = register_parameter("bias", zeros(normalized_shape));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  const int n = normalized_shape_.size();
  bool ok = x.dim() >= n;
  for (int i = 0; ok && i < n; ++i) ok = x.size(x.dim() - n + i) == normalized_shape_[i];
  MT_CHECK(ok, "LayerNorm(", normalized_shape_, "): expected an input whose trailing dims are ", normalized_shape_,
           ", got ", describe(x));
  return functional::layer_norm(x, normalized_shape_, weight_, bias_, opts_.eps);
}

std::string LayerNorm::extra_repr() const {
  return concat(normalized_shape_, ", eps=", opts_.eps,
                ", elementwise_affine=", opts_.elementwise_affine ? "true" : "false");
}

// ---------------------------------------------------------------------------------------------
// BatchNorm2d

BatchNorm2d::BatchNorm2d(int64_t num_features, BatchNorm2dOptions opts)
    : Module("BatchNorm2d"), num_features_(num_features), opts_(opts) {
  MT_CHECK(num_features > 0, "BatchNorm2d: num_features must be positive, got ", num_features);
  MT_CHECK(opts.eps >= 0, "BatchNorm2d: eps must be non-negative, got ", opts.eps);
  MT_CHECK(!opts.momentum || (*opts.momentum >= 0 && *opts.momentum <= 1),
           "BatchNorm2d: momentum must be in [0, 1], got ", *opts.momentum);
  if (opts.affine) {
    weight_ = register_parameter("weight", ones({num_features}));
    bias_ = register_parameter("bias", zeros({num_features}));
  }
  if (opts.track_running_stats) {
    // fp32 whatever Module::to() is asked for: see the class comment.
    running_mean_ = register_buffer("running_mean", zeros({num_features}), {.keep_dtype = true});
    running_var_ = register_buffer("running_var", ones({num_features}), {.keep_dtype = true});
    num_batches_tracked_ = register_buffer("num_batches_tracked", zeros({}, {.dtype = kInt64}));
  }
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  MT_CHECK(x.dim() == 4 && x.size(1) == num_features_, "BatchNorm2d(", num_features_, "): expected an input [N, ",
           num_features_, ", H, W], got ", describe(x));
  // PyTorch's _BatchNorm.forward: count the batch, pick the averaging factor, and use batch
  // statistics in training or when no running statistics are kept.
  double factor = 0.0;
  if (is_training() && opts_.track_running_stats) {
    NoGradGuard no_grad;
    int64_t n = num_batches_tracked_.item<int64_t>() + 1;
    num_batches_tracked_.fill_(static_cast<double>(n));
    factor = opts_.momentum ? *opts_.momentum : 1.0 / static_cast<double>(n);
  }
  const bool use_batch_stats = is_training() || !running_mean_.defined();
  const bool pass_running = !is_training() || opts_.track_running_stats;
  return functional::batch_norm(x, pass_running ? running_mean_ : Tensor(), pass_running ? running_var_ : Tensor(),
                                weight_, bias_, use_batch_stats, factor, opts_.eps);
}

std::string BatchNorm2d::extra_repr() const {
  return concat(num_features_, ", eps=", opts_.eps, ", momentum=", opts_.momentum ? concat(*opts_.momentum) : "None",
                ", affine=", opts_.affine ? "true" : "false",
                ", track_running_stats=", opts_.track_running_stats ? "true" : "false");
}

}  // namespace mixtrain::nn
