// CUDA copy (any strides, any dtype pair), fill and the Philox random fills (kernels/copy.h): the
// same values as the CPU kernels, element by element.
#include <cmath>
#include <cstring>

#include "kernels/copy.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/philox.cuh"
#include "backends/cuda/kernels/register.h"

namespace mixtrain::kernels::cuda {
namespace {

template <typename D, typename DS>
void copy_as(const Tensor& dst, const Tensor& src) {
  if (dst.is_contiguous() && src.is_contiguous() && std::is_same_v<D, DS>) {
    DeviceGuard guard(dst.device());
    check(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(), cudaMemcpyDeviceToDevice, stream_of(dst)),
          "copy");
    return;
  }
  const StridedView out = view_of(dst), in = view_of(src);
  for_each_index(dst.device(), dst.numel(), [=] __device__(int64_t i) { *at<D>(out, i) = convert<D>(*at<DS>(in, i)); },
                 "copy");
}

template <typename T>
struct Copy {
  static void run(const Tensor& dst, const Tensor& src) {
    dispatch_all(src.dtype(), [&]<typename S>() { copy_as<dev_t<T>, dev_t<S>>(dst, src); });
  }
};

template <typename T>
struct Fill {
  static void run(const Tensor& dst, double value) {
    using D = dev_t<T>;
    // Converted once on the host, as the CPU does (convert<T>(double) through fp32 for 16-bit).
    const D v = scalar_as<T>(value);
    const StridedView out = view_of(dst);
    for_each_index(dst.device(), dst.numel(), [=] __device__(int64_t i) { *at<D>(out, i) = v; }, "fill");
  }
};

// The largest value of D below v (v finite).
template <typename D>
__device__ D next_below(D v) {
  if constexpr (std::is_same_v<D, float>) {
    return nextafterf(v, -INFINITY);
  } else if constexpr (std::is_same_v<D, double>) {
    return nextafter(v, -static_cast<double>(INFINITY));
  } else {
    uint16_t b;
    memcpy(&b, &v, 2);
    if (b == 0 || b == 0x8000) b = 0x8001;
    else b = (b & 0x8000) ? b + 1 : b - 1;
    memcpy(&v, &b, 2);
    return v;
  }
}

// Uniform [a, b) in the compute type, rounded once; values that round up to b are pulled to the
// largest value below it (backends/cpu/kernels/random.cpp does the same).
template <typename D>
__device__ D unit_uniform(const uint32_t r[4], int lane, double a, double b) {
  const double u = std::is_same_v<D, double> ? uints_to_unit_double(r[lane], r[(lane + 1) % 4])
                                             : static_cast<double>(uint_to_unit_float(r[lane]));
  D v = round_to<D>(a + (b - a) * u);
  if (static_cast<double>(load(&v)) >= b && b > a) v = next_below(round_to<D>(b));
  return v;
}

template <typename T>
struct RandomFill {
  static void run(const Tensor& t, const RandomParams& p) {
    using D = dev_t<T>;
    const int64_t n = t.numel();
    D* out = static_cast<D*>(t.raw_data());
    const uint64_t key = p.key, first = p.first_block;
    const bool block_per_element = random_blocks(p.kind, t.dtype(), n) == static_cast<uint64_t>(n);
    switch (p.kind) {
      case RandomKind::kUniform: {
        MT_CHECK(is_floating_dev_v<D>, "uniform_: expected a floating-point tensor, got ", describe(t));
        if constexpr (is_floating_dev_v<D>) {
          const double a = p.a, b = p.b;
          if (block_per_element) {
            for_each_index(t.device(), n, [=] __device__(int64_t i) {
              uint32_t r[4];
              philox(first + i, key, 0, r);
              out[i] = unit_uniform<D>(r, 0, a, b);
            }, "uniform_");
          } else {
            for_each_index(t.device(), (n + 3) / 4, [=] __device__(int64_t blk) {
              uint32_t r[4];
              philox(first + blk, key, 0, r);
              for (int lane = 0; lane < 4 && blk * 4 + lane < n; ++lane) out[blk * 4 + lane] = unit_uniform<D>(r, lane, a, b);
            }, "uniform_");
          }
        }
        return;
      }
      case RandomKind::kNormal: {
        MT_CHECK(is_floating_dev_v<D>, "normal_: expected a floating-point tensor, got ", describe(t));
        if constexpr (is_floating_dev_v<D>) {
          const double mean = p.a, stddev = p.b;
          for_each_index(t.device(), n, [=] __device__(int64_t i) {
            uint32_t r[4];
            philox(first + i, key, 0, r);
            const double u1 = 1.0 - uints_to_unit_double(r[0], r[1]);
            const double u2 = uints_to_unit_double(r[2], r[3]);
            // CUDA's fp64 log and cos are within 1-2 ulp of glibc's: the fp64 value may differ in its
            // last bits from the CPU's, which the rounding to fp32 or 16 bits almost always hides.
            const double z = sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
            out[i] = round_to<D>(mean + stddev * z);
          }, "normal_");
        }
        return;
      }
      case RandomKind::kInteger: {
        const uint64_t range = static_cast<uint64_t>(p.high - p.low);
        const int64_t low = p.low;
        for_each_index(t.device(), n, [=] __device__(int64_t i) {
          uint32_t r[4];
          philox(first + i, key, 0, r);
          const uint64_t bits = (static_cast<uint64_t>(r[0]) << 32) | r[1];
          out[i] = round_to<D>(static_cast<double>(low + static_cast<int64_t>(bits % range)));
        }, "random_");
        return;
      }
    }
  }
};

}  // namespace

void register_cuda_copy(const Registry& r) {
  r.all_dtypes<Copy>(copy_table);
  r.all_dtypes<Fill>(fill_table);
  r.all_dtypes<RandomFill>(random_fill_table);
}

}  // namespace mixtrain::kernels::cuda
