// src/core/philox.h (internal): the Philox-4x32-10 counter-based generator's block function, written
// once for every lane type: one 32-bit lane on the host and in CUDA kernels (random::philox,
// src/backends/cuda/kernels/philox.cuh), eight AVX2 lanes in the optimizer's stochastic rounding
// (src/backends/cpu/kernels/adam.cpp), which must give the same bits.
//
// A block is (counter = {block low, block high, stream, 0}, key = seed) -> four 32-bit words after
// ten rounds. A lane type L provides `V` and, by reference (a vector passed by value between
// functions of different ISA targets changes the ABI):
//   L::mullo(out, a, m), L::mulhi(out, a, m)  the low / high 32 bits of a * m (m a constant)
//   L::xor3(out, a, b, c)                     a ^ b ^ c
//   L::add(v, w)                              v += w (the key schedule)
// philox_rounds is always inlined, so that its body takes the ISA of the function it is inlined
// into (the AVX2 lane type's functions carry target("avx2"); the rounds themselves carry none).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MT_PHILOX_INLINE __host__ __device__ __forceinline__
#else
#define MT_PHILOX_INLINE [[gnu::always_inline]] inline
#endif

namespace mixtrain::random::detail {

inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;  // round multipliers
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;  // key increments (Weyl)
inline constexpr int kPhiloxRounds = 10;

// The ten rounds on counter words c0..c3 with key words key0, key1 (the schedule advances copies;
// the keys come by reference too, as clang rejects a vector argument by value into a function that
// carries no vector ISA, even one always inlined).
template <typename L>
MT_PHILOX_INLINE void philox_rounds(typename L::V& c0, typename L::V& c1, typename L::V& c2, typename L::V& c3,
                                    const typename L::V& key0, const typename L::V& key1) {
  typename L::V k0 = key0, k1 = key1;
  for (int round = 0; round < kPhiloxRounds; ++round) {
    typename L::V lo0, hi0, lo1, hi1;
    L::mullo(lo0, c0, kPhiloxM0);
    L::mulhi(hi0, c0, kPhiloxM0);
    L::mullo(lo1, c2, kPhiloxM1);
    L::mulhi(hi1, c2, kPhiloxM1);
    L::xor3(c0, hi1, c1, k0);
    L::xor3(c2, hi0, c3, k1);
    c1 = lo1;
    c3 = lo0;
    L::add(k0, kPhiloxW0);
    L::add(k1, kPhiloxW1);
  }
}

// One lane: plain 32-bit integers (on a CUDA device the high product compiles to mul.hi).
struct ScalarLanes {
  using V = uint32_t;
  MT_PHILOX_INLINE static void mullo(V& out, const V& a, uint32_t m) { out = a * m; }
  MT_PHILOX_INLINE static void mulhi(V& out, const V& a, uint32_t m) {
    out = static_cast<uint32_t>((static_cast<uint64_t>(a) * m) >> 32);
  }
  MT_PHILOX_INLINE static void xor3(V& out, const V& a, const V& b, const V& c) { out = a ^ b ^ c; }
  MT_PHILOX_INLINE static void add(V& v, uint32_t w) { v += w; }
};

// Block `block` of stream `stream` under `key`: out[0..3].
MT_PHILOX_INLINE void philox_block(uint64_t block, uint64_t key, uint32_t stream, uint32_t out[4]) {
  uint32_t c0 = static_cast<uint32_t>(block), c1 = static_cast<uint32_t>(block >> 32), c2 = stream, c3 = 0;
  philox_rounds<ScalarLanes>(c0, c1, c2, c3, static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32));
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

}  // namespace mixtrain::random::detail
