// mixtrain/nn/conv.h: Conv2d.
#pragma once

#include <cstdint>

#include "mixtrain/nn/module.h"
#include "mixtrain/nn/size2.h"
#include "mixtrain/random.h"

namespace mixtrain::nn {

struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;  // zero padding on both sides
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  Generator* generator = nullptr;  // for the initial values; nullptr: the process-wide generator
};

// x [N, in_channels, H, W] -> [N, out_channels, H', W'] with
// H' = (H + 2 padding.h - dilation.h (kernel.h - 1) - 1) / stride.h + 1 (same for W), through
// nn::functional::conv2d (oneDNN; 16-bit under autocast with fp32 accumulation).
// Parameters (PyTorch's names and layouts): "weight" [out, in / groups, kh, kw], "bias" [out].
// Initialisation as PyTorch: weight kaiming_uniform(a = sqrt(5)), i.e. U(-1/sqrt(fan_in),
// 1/sqrt(fan_in)) with fan_in = in / groups * kh * kw; bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions opts = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined when built with bias = false
  const Conv2dOptions& options() const { return opts_; }

 private:
  int64_t in_channels_, out_channels_;
  Size2 kernel_size_;
  Conv2dOptions opts_;
  Tensor weight_, bias_;
};

}  // namespace mixtrain::nn
