// mixtrain/nn/pooling.h: MaxPool2d and AvgPool2d over x [N, C, H, W] -> [N, C, H', W'] with
// H' = (H + 2 padding.h - kernel.h) / stride.h + 1 (floor; PyTorch's ceil_mode = false).
// AvgPool2d counts padding toward the divisor (PyTorch's count_include_pad = true default).
// No parameters; run in the input dtype (pooling is unlisted in the autocast table).
#pragma once

#include <optional>

#include "mixtrain/nn/module.h"
#include "mixtrain/nn/size2.h"

namespace mixtrain::nn {

struct Pool2dOptions {
  std::optional<Size2> stride;  // default: the kernel size (PyTorch's default)
  Size2 padding = 0;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, Pool2dOptions opts = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

 private:
  Size2 kernel_size_, stride_, padding_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel_size, Pool2dOptions opts = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

 private:
  Size2 kernel_size_, stride_, padding_;
};

}  // namespace mixtrain::nn
