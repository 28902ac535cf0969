// CUDA dropout, forward and backward (kernels/nn.h; the CPU's: src/backends/cpu/kernels/nn_dropout.cpp):
// the CPU's Philox mapping and comparison, so the same mask and the same bits.
#include <cmath>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/register.h"
#include "backends/cuda/kernels/philox.cuh"
#include "kernels/copy.h"
#include "kernels/nn.h"

namespace mixtrain::kernels::cuda {
namespace {

// ---- dropout: one thread per Philox block of 4 elements.
template <typename T>
struct DropoutFwd {
  static void run(const Tensor& x, const Tensor& y, const Tensor& mask, double p, uint64_t seed,
                  uint64_t first_block) {
    using D = dev_t<T>;
    using C = opmath_t<D>;
    const int64_t n = x.numel();
    const float keep = static_cast<float>(1.0 - p);
    const C scale = static_cast<C>(1.0 / (1.0 - p));
    const D* px = static_cast<const D*>(x.raw_data());
    D* py = static_cast<D*>(y.raw_data());
    uint8_t* pm = static_cast<uint8_t*>(mask.raw_data());
    const D zero = scalar_as<T>(0.0);
    for_each_index(x.device(), (n + 3) / 4, [=] __device__(int64_t blk) {
      uint32_t r[4];
      philox(first_block + static_cast<uint64_t>(blk), seed, 0, r);
      for (int lane = 0; lane < 4 && blk * 4 + lane < n; ++lane) {
        const int64_t i = blk * 4 + lane;
        const bool kept = uint_to_unit_float(r[lane]) < keep;
        pm[i] = kept ? 1 : 0;
        py[i] = kept ? round_to<D>(load(px + i) * scale) : zero;
      }
    }, "dropout");
  }
};

template <typename T>
struct DropoutBwd {
  static void run(const Tensor& gy, const Tensor& mask, const Tensor& gx, double scale) {
    using D = dev_t<T>;
    using C = opmath_t<D>;
    const C s = static_cast<C>(scale);
    const D* pg = static_cast<const D*>(gy.raw_data());
    const uint8_t* pm = static_cast<const uint8_t*>(mask.raw_data());
    D* px = static_cast<D*>(gx.raw_data());
    for_each_index(gx.device(), gx.numel(), [=] __device__(int64_t i) {
      px[i] = round_to<D>(load(pg + i) * static_cast<C>(pm[i]) * s);
    }, "dropout_backward");
  }
};

}  // namespace

void register_cuda_dropout(const Registry& r) {
  r.floating<DropoutFwd>(dropout_fwd);
  r.floating<DropoutBwd>(dropout_bwd);
}

}  // namespace mixtrain::kernels::cuda
