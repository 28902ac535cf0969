// CPU dropout, forward (draws the mask) and backward (reapplies it).
//
// Accumulation: none (one multiply per element, in fp32; fp64 for fp64) and rounded once on store.
// The keep decision of element i depends only on (seed, first_block + i / 4, i % 4), the same
// Philox layout as the random factories, so the mask is identical for any thread count.
#include "backends/cpu/kernels/nn_vec.h"
#include "kernels/nn.h"
#include "mixtrain/random.h"
#include "backends/cpu/kernels/host_ptr.h"
#include "backends/cpu/kernels/register.h"

namespace mixtrain::kernels {


namespace {

// Philox blocks per parallel task (4 elements each).
constexpr int64_t kBlockGrain = 2048;

template <typename T>
struct DropoutFwd {
  static void run(const Tensor& x, const Tensor& y, const Tensor& mask, double p, uint64_t seed,
                  uint64_t first_block) {
    using F = opmath_t<T>;
    const int64_t n = x.numel();
    const float keep = static_cast<float>(1.0 - p);
    const F scale = static_cast<F>(1.0 / (1.0 - p));
    const T* xp = host_ptr<T>(x);
    T* yp = host_ptr<T>(y);
    uint8_t* mp = host_ptr<uint8_t>(mask);
    parallel_for((n + 3) / 4, kBlockGrain, [&](int64_t begin, int64_t end) {
      for (int64_t blk = begin; blk < end; ++blk) {
        const auto r = random::philox(first_block + static_cast<uint64_t>(blk), seed);
        for (int64_t i = blk * 4; i < std::min(n, blk * 4 + 4); ++i) {
          const bool kept = random::uint_to_unit_float(r[i - blk * 4]) < keep;
          mp[i] = kept ? 1 : 0;
          yp[i] = kept ? convert<T>(convert<F>(xp[i]) * scale) : T(0.0f);
        }
      }
    });
  }
};

template <typename T>
struct DropoutBwd {
  static void run(const Tensor& gy, const Tensor& mask, const Tensor& gx, double scale) {
    using F = opmath_t<T>;
    const F s = static_cast<F>(scale);
    cpu_kernel<F, T, T, uint8_t>(gx, [s](F g, F m) { return g * m * s; }, gy, mask);
  }
};

}  // namespace

void register_cpu_dropout(const Registry& r) {
  r.floating<DropoutFwd>(dropout_fwd);
  r.floating<DropoutBwd>(dropout_bwd);
}

}  // namespace mixtrain::kernels
