// mixtrain/nn/normalization.h: LayerNorm and BatchNorm2d.
#pragma once

#include <cstdint>
#include <optional>

#include "mixtrain/nn/module.h"
#include "mixtrain/shape.h"

namespace mixtrain::nn {

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;  // learn "weight" and "bias" of normalized_shape
  bool bias = true;                // with elementwise_affine: also learn "bias"
};

// Normalises x [..., *normalized_shape] over its trailing dims (biased variance, fp32 statistics;
// runs in fp32 under autocast), then y = x_hat * weight + bias.
// Parameters: "weight" (ones) and "bias" (zeros), both of shape normalized_shape, fp32.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, LayerNormOptions opts = {});
  explicit LayerNorm(int64_t normalized_dim, LayerNormOptions opts = {}) : LayerNorm(Shape{normalized_dim}, opts) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const Tensor& weight() const { return weight_; }  // undefined without elementwise_affine
  const Tensor& bias() const { return bias_; }

 private:
  Shape normalized_shape_;
  LayerNormOptions opts_;
  Tensor weight_, bias_;
};

struct BatchNorm2dOptions {
  double eps = 1e-5;
  // Weight of the new batch statistic in the running average. nullopt: cumulative moving average
  // (factor 1 / num_batches_tracked), PyTorch's momentum=None.
  std::optional<double> momentum = 0.1;
  bool affine = true;               // learn "weight" (ones) and "bias" (zeros) of shape [C]
  bool track_running_stats = true;  // keep the running statistics (else batch statistics always)
};

// x [N, C, H, W] -> same shape and dtype. Training: normalises with the batch mean and biased
// variance over (N, H, W), and updates running_mean / running_var (the latter with the unbiased
// variance) and num_batches_tracked. Eval: normalises with the running statistics.
// State (PyTorch's names): parameters "weight", "bias" [C]; buffers "running_mean" (zeros) and
// "running_var" (ones), [C] float32, and "num_batches_tracked" (int64 scalar).
// The running statistics stay float32 under Module::to(kBFloat16 / kFloat16): a momentum update of
// 0.1 * delta is below half an ulp of bf16 for most deltas and would be lost. The kernel accepts a
// 16-bit input with fp32 statistics and parameters (PyTorch's mixed batch norm).
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNorm2dOptions opts = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const Tensor& weight() const { return weight_; }  // undefined without affine
  const Tensor& bias() const { return bias_; }
  const Tensor& running_mean() const { return running_mean_; }  // undefined without track_running_stats
  const Tensor& running_var() const { return running_var_; }
  const Tensor& num_batches_tracked() const { return num_batches_tracked_; }

 private:
  int64_t num_features_;
  BatchNorm2dOptions opts_;
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
};

}  // namespace mixtrain::nn
