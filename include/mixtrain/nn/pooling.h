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

namespace functional {
struct Pool2dOptions;
}

// What MaxPool2d and AvgPool2d share: the window (kernel size, stride, padding) and its checks, the
// input check and extra_repr(). Each adds only its forward().
class Pool2dBase : public Module {
 public:
  std::string extra_repr() const override;

 protected:
  Pool2dBase(const char* type_name, Size2 kernel_size, const Pool2dOptions& opts);
  // Checks that x is [N, C, H, W], then runs `fn` (functional::max_pool2d or avg_pool2d) over this window.
  Tensor pool(const Tensor& x, Tensor (*fn)(const Tensor&, const functional::Pool2dOptions&)) const;

 private:
  Size2 kernel_size_, stride_, padding_;
};

class MaxPool2d : public Pool2dBase {
 public:
  explicit MaxPool2d(Size2 kernel_size, Pool2dOptions opts = {});
  Tensor forward(const Tensor& x) override;
};

class AvgPool2d : public Pool2dBase {
 public:
  explicit AvgPool2d(Size2 kernel_size, Pool2dOptions opts = {});
  Tensor forward(const Tensor& x) override;
};

}  // namespace mixtrain::nn
