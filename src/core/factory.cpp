// Tensor factories, including the counter-based random ones (see random.h for the guarantee that the
// values do not depend on the thread count).
#include "mixtrain/factory.h"

#include <cmath>
#include <numbers>

#include "kernels/copy.h"
#include "kernels/cpu/loops.h"
#include "mixtrain/autograd.h"

namespace mixtrain {

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}
void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

namespace random {

std::array<uint32_t, 4> philox(uint64_t block, uint64_t key, uint32_t stream) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(block), c1 = static_cast<uint32_t>(block >> 32), c2 = stream, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kW0;
    k1 += kW1;
  }
  return {c0, c1, c2, c3};
}

}  // namespace random

Tensor empty(const Shape& shape, TensorOptions opts) {
  Tensor t = Tensor::empty(shape, opts.dtype, opts.device);
  if (opts.requires_grad) t.requires_grad_();
  return t;
}

Tensor full(const Shape& shape, double value, TensorOptions opts) {
  Tensor t = Tensor::empty(shape, opts.dtype, opts.device);
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
  Tensor t = Tensor::empty({n}, opts.dtype, opts.device);
  kernels::dispatch_all(opts.dtype, [&]<typename T>() {
    T* p = t.data_ptr<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = kernels::convert<T>(start + static_cast<double>(i) * step);
  });
  if (opts.requires_grad) t.requires_grad_();
  return t;
}

Tensor arange(int64_t end, TensorOptions opts) { return arange(0.0, static_cast<double>(end), 1.0, opts); }

namespace {

// Fills `t` (contiguous) element by element from Philox outputs: value(i) = draw(block outputs for
// counter first_block + i/4, lane i%4). `per_element_blocks` > 0 means each element uses whole
// blocks of its own (used when one value needs more than 32 bits).
template <typename T, typename Draw>
void fill_random(Tensor& t, Generator* gen, int blocks_per_element, Draw&& draw) {
  Generator& g = gen ? *gen : default_generator();
  const int64_t n = t.numel();
  const uint64_t key = g.seed();
  if (blocks_per_element == 0) {
    const uint64_t first = g.advance(static_cast<uint64_t>((n + 3) / 4));
    T* p = t.data_ptr<T>();
    kernels::parallel_for((n + 3) / 4, 2048, [&](int64_t b, int64_t e) {
      for (int64_t blk = b; blk < e; ++blk) {
        auto r = random::philox(first + blk, key);
        for (int lane = 0; lane < 4 && blk * 4 + lane < n; ++lane) p[blk * 4 + lane] = draw(r, lane);
      }
    });
  } else {
    const uint64_t first = g.advance(static_cast<uint64_t>(n) * blocks_per_element);
    T* p = t.data_ptr<T>();
    kernels::parallel_for(n, 2048, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = draw(random::philox(first + i, key), 0);
    });
  }
}

// The largest value of T below v (v finite).
template <typename T>
T next_below(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::nextafter(v, -std::numeric_limits<T>::infinity());
  } else {
    uint16_t b = v.bits();
    if (b == 0 || b == 0x8000) return T::from_bits(0x8001);
    return T::from_bits((b & 0x8000) ? b + 1 : b - 1);
  }
}

// Uniform [0,1) in the opmath type of T, rounded once to T. Values that round up to 1 in a 16-bit
// type are pulled back to the largest value below 1, so [0,1) holds in every dtype.
template <typename T>
T unit_uniform(const std::array<uint32_t, 4>& r, int lane, double low, double high) {
  double u = std::is_same_v<T, double> ? random::uints_to_unit_double(r[lane], r[(lane + 1) % 4])
                                       : static_cast<double>(random::uint_to_unit_float(r[lane]));
  T v = kernels::convert<T>(low + (high - low) * u);
  if (kernels::convert<double>(v) >= high && high > low) v = next_below(kernels::convert<T>(high));
  return v;
}

}  // namespace

Tensor& uniform_(Tensor& t, double low, double high, Generator* gen) {
  MT_CHECK(t.is_floating_point(), "uniform_: expected a floating-point tensor, got ", describe(t));
  MT_CHECK(t.is_contiguous(), "uniform_: expected a contiguous tensor, got ", describe(t));
  kernels::dispatch_floating(t.dtype(), "uniform_", [&]<typename T>() {
    fill_random<T>(t, gen, std::is_same_v<T, double> ? 1 : 0,
                   [&](const std::array<uint32_t, 4>& r, int lane) { return unit_uniform<T>(r, lane, low, high); });
  });
  t.bump_version();
  return t;
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  MT_CHECK(t.is_floating_point(), "normal_: expected a floating-point tensor, got ", describe(t));
  MT_CHECK(t.is_contiguous(), "normal_: expected a contiguous tensor, got ", describe(t));
  kernels::dispatch_floating(t.dtype(), "normal_", [&]<typename T>() {
    // One Philox block per element: two 32-bit uniforms for Box-Muller (u1 in (0,1] avoids log 0).
    fill_random<T>(t, gen, 1, [&](const std::array<uint32_t, 4>& r, int) {
      double u1 = 1.0 - random::uints_to_unit_double(r[0], r[1]);
      double u2 = random::uints_to_unit_double(r[2], r[3]);
      double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
      return kernels::convert<T>(mean + std * z);
    });
  });
  t.bump_version();
  return t;
}

Tensor rand(const Shape& shape, TensorOptions opts, Generator* gen) {
  Tensor t = Tensor::empty(shape, opts.dtype, opts.device);
  uniform_(t, 0.0, 1.0, gen);
  if (opts.requires_grad) t.requires_grad_();
  return t;
}

Tensor randn(const Shape& shape, TensorOptions opts, Generator* gen) {
  Tensor t = Tensor::empty(shape, opts.dtype, opts.device);
  normal_(t, 0.0, 1.0, gen);
  if (opts.requires_grad) t.requires_grad_();
  return t;
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts, Generator* gen) {
  MT_CHECK(high > low, "randint: empty range [", low, ", ", high, ")");
  Tensor t = Tensor::empty(shape, opts.dtype, opts.device);
  const uint64_t range = static_cast<uint64_t>(high - low);
  kernels::dispatch_all(opts.dtype, [&]<typename T>() {
    // 64 random bits per element; the modulo bias is below 2^-32 for ranges under 2^32.
    fill_random<T>(t, gen, 1, [&](const std::array<uint32_t, 4>& r, int) {
      uint64_t bits = (static_cast<uint64_t>(r[0]) << 32) | r[1];
      return kernels::convert<T>(static_cast<double>(low + static_cast<int64_t>(bits % range)));
    });
  });
  return t;
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions opts) {
  MT_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "from_vector: ", values.size(),
           " values do not fill shape ", shape, " (", shape.numel(), " elements)");
  Tensor t = Tensor::empty(shape, opts.dtype, opts.device);
  kernels::dispatch_all(opts.dtype, [&]<typename D>() {
    D* p = t.data_ptr<D>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = kernels::convert<D>(static_cast<T>(values[i]));
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
