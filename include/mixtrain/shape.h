// mixtrain/shape.h: a fixed-capacity list of up to kMaxDims int64 values, used for shapes and
// strides. Fixed capacity keeps tensor metadata off the heap in the hot loop of a training step.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

#include "mixtrain/error.h"

namespace mixtrain {

inline constexpr int kMaxDims = 8;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(std::span<const int64_t> dims) { assign(dims.begin(), dims.end()); }
  Shape(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }  // NOLINT: implicit by design
  static Shape filled(int n, int64_t value) {
    Shape s;
    s.resize(n, value);
    return s;
  }

  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t& operator[](int i) { return d_[i]; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t* begin() { return d_; }
  int64_t* end() { return d_ + n_; }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + n_; }
  const int64_t* data() const { return d_; }
  int64_t back() const { return d_[n_ - 1]; }

  void push_back(int64_t v) {
    MT_CHECK(n_ < kMaxDims, "tensors have at most ", kMaxDims, " dimensions");
    d_[n_++] = v;
  }
  void insert(int pos, int64_t v) {
    MT_CHECK(n_ < kMaxDims, "tensors have at most ", kMaxDims, " dimensions");
    std::copy_backward(d_ + pos, d_ + n_, d_ + n_ + 1);
    d_[pos] = v;
    ++n_;
  }
  void erase(int pos) {
    std::copy(d_ + pos + 1, d_ + n_, d_ + pos);
    --n_;
  }
  void resize(int n, int64_t value = 0) {
    MT_CHECK(n >= 0 && n <= kMaxDims, "tensors have at most ", kMaxDims, " dimensions, got ", n);
    for (int i = n_; i < n; ++i) d_[i] = value;
    n_ = n;
  }

  // Product of all entries (1 for an empty shape: a scalar has one element).
  int64_t numel() const {
    int64_t p = 1;
    for (int i = 0; i < n_; ++i) p *= d_[i];
    return p;
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  std::string str() const;

  bool operator==(const Shape& o) const { return n_ == o.n_ && std::equal(begin(), end(), o.begin()); }

 private:
  template <typename It>
  void assign(It first, It last) {
    n_ = 0;
    for (; first != last; ++first) push_back(*first);
  }
  int64_t d_[kMaxDims] = {};
  int n_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

// Row-major (C-contiguous) strides for a shape, in elements.
Shape contiguous_strides(const Shape& shape);

// Wraps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
int wrap_dim(int64_t dim, int ndim, const char* op);

// Broadcast two shapes (NumPy rules); throws naming `op` when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace mixtrain
