// Tensor factories, including the counter-based random ones (see random.h for the guarantee that the
// values do not depend on the thread count).
#include "mixtrain/factory.h"

#include <cmath>

#include "kernels/copy.h"
#include "core/backend.h"
#include "kernels/convert.h"
#include "kernels/dtype_dispatch.h"
#include "mixtrain/autograd.h"

namespace mixtrain {

namespace {

Device device_of(const TensorOptions& opts) { return opts.device.value_or(default_device()); }

// Draws into contiguous `t` on its device: the generator hands out the Philox blocks, the device's
// kernel turns them into values.
void draw(const Tensor& t, kernels::RandomParams p, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  p.key = g.seed();
  p.first_block = g.advance(kernels::random_blocks(p.kind, t.dtype(), t.numel()));
  kernels::random_fill_table(t.device(), t.dtype())(t, p);
}

// Host staging element for dtype D (std::vector<bool> packs bits; a bool element is one byte, 0 or 1).
template <typename D>
using Staged = std::conditional_t<std::is_same_v<D, bool>, uint8_t, D>;

// A tensor on `device` holding `values` (host memory, already in its dtype): one host-to-device copy.
template <typename D>
Tensor upload(const std::vector<D>& values, const Shape& shape, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  backend_for(device).copy_from_host(t.raw_data(), values.data(), t.nbytes(), device);
  return t;
}

}  // namespace

Tensor empty(const Shape& shape, TensorOptions opts) {
  Tensor t = Tensor::empty(shape, opts.dtype, device_of(opts));
  if (opts.requires_grad) t.requires_grad_();
  return t;
}

Tensor full(const Shape& shape, double value, TensorOptions opts) {
  Tensor t = Tensor::empty(shape, opts.dtype, device_of(opts));
  kernels::fill(t, value);
  if (opts.requires_grad) t.requires_grad_();
  return t;
}

Tensor zeros(const Shape& shape, TensorOptions opts) { return full(shape, 0.0, opts); }
Tensor ones(const Shape& shape, TensorOptions opts) { return full(shape, 1.0, opts); }
Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, {.dtype = t.dtype(), .device = t.device()}); }
Tensor scalar_tensor(double value, TensorOptions opts) { return full(Shape{}, value, opts); }

Tensor arange(double start, double end, double step, TensorOptions opts) {
  MT_CHECK(step != 0, "arange: step must be non-zero");
  MT_CHECK((end - start) / step >= 0, "arange: range [", start, ", ", end, ") is empty or inverted for step ", step);
  int64_t n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor t = kernels::dispatch_all(opts.dtype, [&]<typename T>() {
    std::vector<Staged<T>> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) values[i] = kernels::convert<T>(start + static_cast<double>(i) * step);
    return upload(values, Shape{n}, opts.dtype, device_of(opts));
  });
  if (opts.requires_grad) t.requires_grad_();
  return t;
}

Tensor arange(int64_t end, TensorOptions opts) { return arange(0.0, static_cast<double>(end), 1.0, opts); }

namespace {
// uniform_ / normal_: a floating, contiguous tensor filled in place from the generator.
Tensor& draw_floating_(const char* op, Tensor& t, const kernels::RandomParams& p, Generator* gen) {
  MT_CHECK(t.is_floating_point(), op, ": expected a floating-point tensor, got ", describe(t));
  MT_CHECK(t.is_contiguous(), op, ": expected a contiguous tensor, got ", describe(t));
  draw(t, p, gen);
  t.bump_version();
  return t;
}
}  // namespace

Tensor& uniform_(Tensor& t, double low, double high, Generator* gen) {
  return draw_floating_("uniform_", t, {.kind = kernels::RandomKind::kUniform, .a = low, .b = high}, gen);
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  return draw_floating_("normal_", t, {.kind = kernels::RandomKind::kNormal, .a = mean, .b = std}, gen);
}

Tensor rand(const Shape& shape, TensorOptions opts, Generator* gen) {
  Tensor t = Tensor::empty(shape, opts.dtype, device_of(opts));
  uniform_(t, 0.0, 1.0, gen);
  if (opts.requires_grad) t.requires_grad_();
  return t;
}

Tensor randn(const Shape& shape, TensorOptions opts, Generator* gen) {
  Tensor t = Tensor::empty(shape, opts.dtype, device_of(opts));
  normal_(t, 0.0, 1.0, gen);
  if (opts.requires_grad) t.requires_grad_();
  return t;
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts, Generator* gen) {
  MT_CHECK(high > low, "randint: empty range [", low, ", ", high, ")");
  Tensor t = Tensor::empty(shape, opts.dtype, device_of(opts));
  draw(t, {.kind = kernels::RandomKind::kInteger, .low = low, .high = high}, gen);
  return t;
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions opts) {
  MT_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "from_vector: ", values.size(),
           " values do not fill shape ", shape, " (", shape.numel(), " elements)");
  Tensor t = kernels::dispatch_all(opts.dtype, [&]<typename D>() {
    std::vector<Staged<D>> converted(values.size());
    for (size_t i = 0; i < values.size(); ++i) converted[i] = kernels::convert<D>(static_cast<T>(values[i]));
    return upload(converted, shape, opts.dtype, device_of(opts));
  });
  if (opts.requires_grad) t.requires_grad_();
  return t;
}

template Tensor from_vector(const std::vector<float>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<double>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<float16>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<bfloat16>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<int32_t>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<int64_t>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<uint8_t>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<bool>&, const Shape&, TensorOptions);

}  // namespace mixtrain
