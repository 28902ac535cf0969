// mixtrain/factory.h: functions that create tensors.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mixtrain/random.h"
#include "mixtrain/tensor.h"

namespace mixtrain {

struct TensorOptions {
  DType dtype = kFloat32;
  std::optional<Device> device;  // default_device() (device.h) when unset
  bool requires_grad = false;
};

Tensor empty(const Shape& shape, TensorOptions opts = {});
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, double value, TensorOptions opts = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
// A 0-dim tensor holding `value`.
Tensor scalar_tensor(double value, TensorOptions opts = {});

// [start, end) with `step`; dtype defaults to int64 (set opts.dtype for floats).
Tensor arange(double start, double end, double step = 1.0, TensorOptions opts = {.dtype = kInt64});
Tensor arange(int64_t end, TensorOptions opts = {.dtype = kInt64});

// Uniform [0, 1), standard normal, and integers uniform in [low, high). Generator defaults to the
// process-wide one (see random.h for the determinism guarantee).
Tensor rand(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor randn(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts = {.dtype = kInt64},
               Generator* gen = nullptr);
// Uniform in [low, high) (in place; used by initialisers).
Tensor& uniform_(Tensor& t, double low, double high, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean, double std, Generator* gen = nullptr);

// Copies `values` into a new tensor of `shape` (whose numel must match), converted to opts.dtype
// (which defaults to T's dtype when left as float32 and T is not float).
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions opts = {.dtype = dtype_v<T>});
template <typename T>
Tensor from_vector(const std::vector<T>& values) {
  return from_vector(values, Shape{static_cast<int64_t>(values.size())}, {.dtype = dtype_v<T>});
}

}  // namespace mixtrain
