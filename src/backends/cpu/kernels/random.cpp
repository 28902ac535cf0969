// CPU random fills (kernels/copy.h): Philox blocks by element index, so the values depend only on
// the key, the first block and the index, never on the thread count.
#include <cmath>
#include <limits>
#include <numbers>

#include "kernels/copy.h"
#include "backends/cpu/kernels/host_ptr.h"
#include "backends/cpu/kernels/loops.h"
#include "backends/cpu/kernels/register.h"
#include "mixtrain/random.h"

namespace mixtrain::kernels {
namespace {

template <typename T>
constexpr bool is_floating_v = std::is_floating_point_v<T> || std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

// Fills contiguous `t` element by element from Philox outputs: value(i) = draw(block outputs for
// counter first + i/4, lane i%4), or draw(block first + i, 0) when each element takes a whole block
// (values that need more than 32 bits).
template <typename T, typename Draw>
void fill_random(const Tensor& t, const RandomParams& p, Draw&& draw) {
  const int64_t n = t.numel();
  T* out = host_ptr<T>(t);
  if (random_blocks(p.kind, t.dtype(), n) != static_cast<uint64_t>(n) || n == 0) {
    parallel_for((n + 3) / 4, 2048, [&](int64_t b, int64_t e) {
      for (int64_t blk = b; blk < e; ++blk) {
        auto r = random::philox(p.first_block + blk, p.key);
        for (int lane = 0; lane < 4 && blk * 4 + lane < n; ++lane) out[blk * 4 + lane] = draw(r, lane);
      }
    });
  } else {
    parallel_for(n, 2048, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = draw(random::philox(p.first_block + i, p.key), 0);
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
  T v = convert<T>(low + (high - low) * u);
  if (convert<double>(v) >= high && high > low) v = next_below(convert<T>(high));
  return v;
}

template <typename T>
struct RandomFill {
  static void run(const Tensor& t, const RandomParams& p) {
    switch (p.kind) {
      case RandomKind::kUniform:
        if constexpr (is_floating_v<T>)
          fill_random<T>(t, p, [&](const std::array<uint32_t, 4>& r, int lane) { return unit_uniform<T>(r, lane, p.a, p.b); });
        else
          MT_FAIL("uniform_: expected a floating-point tensor, got ", describe(t));
        return;
      case RandomKind::kNormal:
        if constexpr (is_floating_v<T>) {
          // One Philox block per element: two 32-bit uniforms for Box-Muller (u1 in (0,1] avoids log 0).
          fill_random<T>(t, p, [&](const std::array<uint32_t, 4>& r, int) {
            double u1 = 1.0 - random::uints_to_unit_double(r[0], r[1]);
            double u2 = random::uints_to_unit_double(r[2], r[3]);
            double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
            return convert<T>(p.a + p.b * z);
          });
        } else {
          MT_FAIL("normal_: expected a floating-point tensor, got ", describe(t));
        }
        return;
      case RandomKind::kInteger: {
        const uint64_t range = static_cast<uint64_t>(p.high - p.low);
        // 64 random bits per element; the modulo bias is below 2^-32 for ranges under 2^32.
        fill_random<T>(t, p, [&](const std::array<uint32_t, 4>& r, int) {
          uint64_t bits = (static_cast<uint64_t>(r[0]) << 32) | r[1];
          return convert<T>(static_cast<double>(p.low + static_cast<int64_t>(bits % range)));
        });
        return;
      }
    }
  }
};

}  // namespace

void register_cpu_random(const Registry& r) { r.all_dtypes<RandomFill>(random_fill_table); }

}  // namespace mixtrain::kernels
