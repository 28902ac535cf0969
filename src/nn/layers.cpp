// The single-op layers: Linear, Conv2d, pooling, Flatten, activations, Dropout, Embedding. Each
// checks its input shape against its configuration first, so a wrong model wiring is reported with
// the layer's arguments rather than as a kernel shape error.
#include <cmath>

#include "mixtrain/factory.h"
#include "mixtrain/nn/activation.h"
#include "mixtrain/nn/conv.h"
#include "mixtrain/nn/dropout.h"
#include "mixtrain/nn/embedding.h"
#include "mixtrain/nn/flatten.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/nn/init.h"
#include "mixtrain/nn/linear.h"
#include "mixtrain/nn/pooling.h"
#include "mixtrain/ops/linalg.h"

namespace mixtrain::nn {

namespace F = functional;
using mixtrain::detail::concat;

namespace {
std::string str(bool b) { return b ? "true" : "false"; }
std::string str(const Size2& s) { return s.h == s.w ? std::to_string(s.h) : concat("(", s.h, ", ", s.w, ")"); }
}  // namespace

// ---------------------------------------------------------------------------------------------
// Linear

Linear::Linear(int64_t in_features, int64_t out_features, LinearOptions opts)
    : Module("Linear"), in_features_(in_features), out_features_(out_features), fp8_(opts.fp8) {
  MT_CHECK(in_features > 0 && out_features > 0, "Linear: in_features and out_features must be positive, got ",
           in_features, " and ", out_features);
  // PyTorch's reset_parameters: kaiming_uniform_(a = sqrt(5)) gives U(-1/sqrt(in), 1/sqrt(in)); the
  // bias uses the same bound.
  weight_ = register_parameter("weight", empty({out_features, in_features}));
  init::kaiming_uniform_(weight_, std::sqrt(5.0), init::FanMode::kFanIn, init::Nonlinearity::kLeakyReLU,
                         opts.generator);
  if (opts.bias) {
    double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    bias_ = register_parameter("bias", empty({out_features}));
    init::uniform_(bias_, -bound, bound, opts.generator);
  }
}

Tensor Linear::forward(const Tensor& x) {
  MT_CHECK(x.dim() >= 1 && x.size(-1) == in_features_, "Linear(in_features=", in_features_,
           ", out_features=", out_features_, "): expected an input [..., ", in_features_, "], got ", describe(x));
  if (fp8_ && amp::is_fp8_enabled()) {
    if (!fp8_state_) fp8_state_ = std::make_shared<amp::Fp8LinearState>();
    return amp::fp8_linear(x, weight_, bias_, fp8_state_, amp::fp8_recipe());
  }
  return linear(x, weight_, bias_);
}

std::string Linear::extra_repr() const {
  return concat("in_features=", in_features_, ", out_features=", out_features_, ", bias=", str(bias_.defined()));
}

// ---------------------------------------------------------------------------------------------
// Conv2d

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions opts)
    : Module("Conv2d"), in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size), opts_(opts) {
  MT_CHECK(in_channels > 0 && out_channels > 0, "Conv2d: channel counts must be positive, got ", in_channels, " and ",
           out_channels);
  MT_CHECK(kernel_size.h > 0 && kernel_size.w > 0, "Conv2d: kernel size must be positive, got ", str(kernel_size));
  MT_CHECK(opts.stride.h > 0 && opts.stride.w > 0 && opts.dilation.h > 0 && opts.dilation.w > 0 &&
               opts.padding.h >= 0 && opts.padding.w >= 0,
           "Conv2d: stride and dilation must be positive and padding non-negative, got stride ", str(opts.stride),
           ", padding ", str(opts.padding), ", dilation ", str(opts.dilation));
  MT_CHECK(opts.groups > 0 && in_channels % opts.groups == 0 && out_channels % opts.groups == 0, "Conv2d: groups (",
           opts.groups, ") must divide in_channels (", in_channels, ") and out_channels (", out_channels, ")");
  weight_ =
      register_parameter("weight", empty({out_channels, in_channels / opts.groups, kernel_size.h, kernel_size.w}));
  init::kaiming_uniform_(weight_, std::sqrt(5.0), init::FanMode::kFanIn, init::Nonlinearity::kLeakyReLU,
                         opts.generator);
  if (opts.bias) {
    auto [fan_in, fan_out] = init::calculate_fan_in_and_fan_out(weight_);
    double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    bias_ = register_parameter("bias", empty({out_channels}));
    init::uniform_(bias_, -bound, bound, opts.generator);
  }
  opts_.generator = nullptr;  // only used here; do not keep a pointer that may dangle
}

Tensor Conv2d::forward(const Tensor& x) {
  MT_CHECK(x.dim() == 4 && x.size(1) == in_channels_, "Conv2d(", in_channels_, ", ", out_channels_,
           "): expected an input [N, ", in_channels_, ", H, W], got ", describe(x));
  return F::conv2d(x, weight_, bias_,
                   {.stride_h = opts_.stride.h,
                    .stride_w = opts_.stride.w,
                    .padding_h = opts_.padding.h,
                    .padding_w = opts_.padding.w,
                    .dilation_h = opts_.dilation.h,
                    .dilation_w = opts_.dilation.w,
                    .groups = opts_.groups});
}

std::string Conv2d::extra_repr() const {
  std::string s =
      concat(in_channels_, ", ", out_channels_, ", kernel_size=", str(kernel_size_), ", stride=", str(opts_.stride));
  if (!(opts_.padding == Size2(0))) s += ", padding=" + str(opts_.padding);
  if (!(opts_.dilation == Size2(1))) s += ", dilation=" + str(opts_.dilation);
  if (opts_.groups != 1) s += concat(", groups=", opts_.groups);
  if (!bias_.defined()) s += ", bias=false";
  return s;
}

// ---------------------------------------------------------------------------------------------
// Pooling

Pool2dBase::Pool2dBase(const char* type_name, Size2 kernel_size, const Pool2dOptions& opts)
    : Module(type_name), kernel_size_(kernel_size), stride_(opts.stride.value_or(kernel_size)), padding_(opts.padding) {
  const Size2 k = kernel_size_, s = stride_, p = padding_;
  MT_CHECK(k.h > 0 && k.w > 0 && s.h > 0 && s.w > 0, type_name,
           ": kernel size and stride must be positive, got kernel ", str(k), ", stride ", str(s));
  MT_CHECK(p.h >= 0 && p.w >= 0 && 2 * p.h <= k.h && 2 * p.w <= k.w, type_name,
           ": padding must be at most half the kernel size (PyTorch's rule), got padding ", str(p), " for kernel ",
           str(k));
}

Tensor Pool2dBase::pool(const Tensor& x, Tensor (*fn)(const Tensor&, const F::Pool2dOptions&)) const {
  MT_CHECK(x.dim() == 4, type_name(), ": expected an input [N, C, H, W], got ", describe(x));
  return fn(x, {.kernel_h = kernel_size_.h,
                .kernel_w = kernel_size_.w,
                .stride_h = stride_.h,
                .stride_w = stride_.w,
                .padding_h = padding_.h,
                .padding_w = padding_.w});
}

std::string Pool2dBase::extra_repr() const {
  return concat("kernel_size=", str(kernel_size_), ", stride=", str(stride_), ", padding=", str(padding_));
}

MaxPool2d::MaxPool2d(Size2 kernel_size, Pool2dOptions opts) : Pool2dBase("MaxPool2d", kernel_size, opts) {}

Tensor MaxPool2d::forward(const Tensor& x) { return pool(x, F::max_pool2d); }

AvgPool2d::AvgPool2d(Size2 kernel_size, Pool2dOptions opts) : Pool2dBase("AvgPool2d", kernel_size, opts) {}

Tensor AvgPool2d::forward(const Tensor& x) { return pool(x, F::avg_pool2d); }

// ---------------------------------------------------------------------------------------------
// Flatten

Flatten::Flatten(int64_t start_dim, int64_t end_dim) : Module("Flatten"), start_dim_(start_dim), end_dim_(end_dim) {}

Tensor Flatten::forward(const Tensor& x) { return x.flatten(start_dim_, end_dim_); }

std::string Flatten::extra_repr() const { return concat("start_dim=", start_dim_, ", end_dim=", end_dim_); }

// ---------------------------------------------------------------------------------------------
// Activations

Tensor ReLU::forward(const Tensor& x) { return relu(x); }
Tensor GELU::forward(const Tensor& x) { return gelu(x, opts_.approximate); }
std::string GELU::extra_repr() const {
  return opts_.approximate == GeluApproximation::kTanh ? "approximate='tanh'" : "approximate='none'";
}
Tensor SiLU::forward(const Tensor& x) { return silu(x); }
Tensor Tanh::forward(const Tensor& x) { return tanh(x); }
Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x); }

// ---------------------------------------------------------------------------------------------
// Dropout

namespace {
// A fresh 64-bit seed from the process-wide generator (one Philox block), so successive Dropout
// modules differ but all follow mt::manual_seed.
uint64_t draw_seed() {
  Generator& g = default_generator();
  auto r = random::philox(g.advance(1), g.seed());
  return (static_cast<uint64_t>(r[0]) << 32) | r[1];
}
}  // namespace

Dropout::Dropout(double p, DropoutOptions opts)
    : Module("Dropout"), p_(p), gen_(std::make_shared<Generator>(opts.seed ? *opts.seed : draw_seed())) {
  MT_CHECK(p >= 0.0 && p <= 1.0, "Dropout: probability must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p_ == 0.0) return x;
  return F::dropout(x, p_, true, gen_.get());
}

std::string Dropout::extra_repr() const { return concat("p=", p_); }

// ---------------------------------------------------------------------------------------------
// Embedding

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions opts)
    : Module("Embedding"), num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {
  MT_CHECK(num_embeddings > 0 && embedding_dim > 0, "Embedding: sizes must be positive, got ", num_embeddings, " and ",
           embedding_dim);
  weight_ = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  init::normal_(weight_, 0.0, 1.0, opts.generator);
}

Tensor Embedding::forward(const Tensor& indices) {
  MT_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32, "Embedding(", num_embeddings_, ", ", embedding_dim_,
           "): expected int64 or int32 indices, got ", describe(indices));
  return F::embedding(indices, weight_);
}

std::string Embedding::extra_repr() const { return concat(num_embeddings_, ", ", embedding_dim_); }

}  // namespace mixtrain::nn
