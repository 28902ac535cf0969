// Byte accounting of tensor storage (include/mixtrain/memory.h, src/core/allocator.cpp): exact
// current and peak bytes, 64-byte alignment, views that allocate nothing, and the cache.
//
// The allocator is process-wide, so every check is relative to the numbers read just before.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>

#include "mixtrain/mixtrain.h"
#include "support/expect_error.h"
#include "support/checked_device.h"

namespace mt = mixtrain;

namespace {

int64_t current() { return mt::memory::stats(mixtrain::testing::test_device()).current_bytes; }
int64_t peak() { return mt::memory::stats(mixtrain::testing::test_device()).peak_bytes; }

TEST(Memory, TensorsCountTheirExactBytes) {
  struct Case {
    mt::DType dtype;
    int64_t bytes_per_element;
  };
  for (Case c : {Case{mt::kBFloat16, 2}, Case{mt::kFloat16, 2}, Case{mt::kFloat32, 4}, Case{mt::kFloat64, 8},
                 Case{mt::kBool, 1}}) {
    for (int64_t n : {1, 1001, 1 << 20}) {  // odd sizes too: the allocator rounds, the accounting does not
      SCOPED_TRACE(::testing::Message() << c.dtype << " x " << n);
      const int64_t before = current();
      {
        mt::Tensor t = mt::empty({n}, {.dtype = c.dtype});
        EXPECT_EQ(current() - before, c.bytes_per_element * n);
      }
      EXPECT_EQ(current(), before);  // freed when the last handle goes
    }
  }
}

TEST(Memory, HalfTheBytesOfFloat32) {
  const int64_t before = current();
  mt::Tensor w = mt::randn({256, 784});
  const int64_t fp32_bytes = current() - before;
  mt::Tensor w16 = w.to(mt::kBFloat16);
  EXPECT_EQ(current() - before - fp32_bytes, fp32_bytes / 2);
}

TEST(Memory, PeakFollowsAKnownPattern) {
  mt::memory::reset_peak(mixtrain::testing::test_device());
  const int64_t base = current();
  EXPECT_EQ(peak(), base);
  std::optional<mt::Tensor> a = mt::empty({1000}, {.dtype = mt::kUInt8});
  mt::Tensor b = mt::empty({750}, {.dtype = mt::kFloat32});  // 3000 bytes
  EXPECT_EQ(current(), base + 4000);
  EXPECT_EQ(peak(), base + 4000);
  a.reset();
  EXPECT_EQ(current(), base + 3000);
  EXPECT_EQ(peak(), base + 4000);                             // the peak stays
  mt::Tensor c = mt::empty({250}, {.dtype = mt::kBFloat16});  // 500 bytes
  EXPECT_EQ(current(), base + 3500);
  EXPECT_EQ(peak(), base + 4000);
  mt::Tensor d = mt::empty({1000}, {.dtype = mt::kBFloat16});  // 2000 bytes: a new peak
  EXPECT_EQ(current(), base + 5500);
  EXPECT_EQ(peak(), base + 5500);
  mt::memory::reset_peak(mixtrain::testing::test_device());  // resets to what is live now
  EXPECT_EQ(peak(), base + 5500);
  d = mt::Tensor();
  mt::memory::reset_peak(mixtrain::testing::test_device());
  EXPECT_EQ(peak(), base + 3500);
}

TEST(Memory, StorageIs64ByteAligned) {
  std::vector<mt::Tensor> keep;  // kept alive so that each allocation is a different block
  for (int64_t n : {1, 3, 63, 65, 1000, 4097, 100003}) {
    for (mt::DType dt : {mt::kUInt8, mt::kBFloat16, mt::kFloat32, mt::kFloat64}) {
      keep.push_back(mt::empty({n}, {.dtype = dt}));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(keep.back().raw_data()) % mt::memory::kAlignment, 0u) << n << " " << dt;
    }
  }
  EXPECT_EQ(mt::memory::kAlignment, 64u);
  mt::memory::Tag tag;
  void* p = mt::memory::allocate(0, mt::Device{}, tag);  // zero bytes is allowed
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  mt::memory::deallocate(p, 0, mt::Device{}, tag);
}

TEST(Memory, ViewsDoNotAllocate) {
  mt::Tensor a = mt::zeros({4, 6, 8});
  const mt::memory::Stats before = mt::memory::stats(mixtrain::testing::test_device());
  std::vector<mt::Tensor> views{a.view({24, 8}),
                                a.reshape({-1}),
                                a.transpose(0, 2),
                                a.permute({1, 2, 0}),
                                a.slice(1, 0, 6, 2),
                                a.select(0, 1),
                                a.narrow(2, 1, 3),
                                a.unsqueeze(1),
                                a.flatten(1),
                                a.detach(),
                                a.contiguous(),
                                a.to(mt::kFloat32),
                                a.select(1, 0).unsqueeze(1).expand({4, 5, 8}).squeeze()};
  const mt::memory::Stats after = mt::memory::stats(mixtrain::testing::test_device());
  EXPECT_EQ(after.allocations, before.allocations);
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  for (const mt::Tensor& v : views) EXPECT_TRUE(v.shares_storage(a));
  // A copy does allocate.
  mt::Tensor copy = a.transpose(0, 2).contiguous();
  EXPECT_EQ(mt::memory::stats(mixtrain::testing::test_device()).allocations, before.allocations + 1);
  EXPECT_EQ(mt::memory::stats(mixtrain::testing::test_device()).current_bytes, before.current_bytes + static_cast<int64_t>(a.nbytes()));
}

TEST(Memory, CacheServesARepeatedAllocation) {
  const mt::Shape shape{12345, 7};  // an unusual size, so the cache hit is this test's own block
  { mt::Tensor warm = mt::empty(shape); }
  const mt::memory::Stats s1 = mt::memory::stats(mixtrain::testing::test_device());
  EXPECT_GT(s1.cached_bytes, 0);
  {
    mt::Tensor again = mt::empty(shape);
    const mt::memory::Stats s2 = mt::memory::stats(mixtrain::testing::test_device());
    EXPECT_EQ(s2.system_allocations, s1.system_allocations);  // no malloc: the freed block came back
    EXPECT_EQ(s2.allocations, s1.allocations + 1);
    EXPECT_LT(s2.cached_bytes, s1.cached_bytes);
    EXPECT_EQ(s2.current_bytes, s1.current_bytes + 12345 * 7 * 4);
  }
  EXPECT_EQ(mt::memory::stats(mixtrain::testing::test_device()).frees, s1.frees + 1);
  // empty_cache returns the blocks to the system and leaves current/peak alone.
  const mt::memory::Stats s3 = mt::memory::stats(mixtrain::testing::test_device());
  mt::memory::empty_cache(mixtrain::testing::test_device());
  const mt::memory::Stats s4 = mt::memory::stats(mixtrain::testing::test_device());
  EXPECT_EQ(s4.cached_bytes, 0);
  EXPECT_EQ(s4.current_bytes, s3.current_bytes);
  EXPECT_EQ(s4.peak_bytes, s3.peak_bytes);
  { mt::Tensor fresh = mt::empty(shape); }
  EXPECT_EQ(mt::memory::stats(mixtrain::testing::test_device()).system_allocations, s4.system_allocations + 1);
}

TEST(Memory, TrainingStepPatternReachesASteadyState) {
  // The same sequence of sizes every "step": after the first, nothing reaches the system allocator.
  auto step = [] {
    mt::Tensor x = mt::empty({128, 784});
    mt::Tensor h = mt::empty({128, 256}, {.dtype = mt::kBFloat16});
    mt::Tensor y = mt::empty({128, 10});
    h = mt::Tensor();
    mt::Tensor g = mt::empty({256, 784});
  };
  step();
  const int64_t system = mt::memory::stats(mixtrain::testing::test_device()).system_allocations;
  for (int i = 0; i < 5; ++i) step();
  EXPECT_EQ(mt::memory::stats(mixtrain::testing::test_device()).system_allocations, system);
}

TEST(Memory, UnavailableDeviceIsAnError) {
  // An index past the last GPU (any index where there is none, or no CUDA in this build).
  const mt::Device absent(mt::kCUDA, static_cast<int16_t>(mt::device_count(mt::kCUDA)));
  EXPECT_THROW(mt::memory::stats(absent), mt::Error);
  mt::memory::Tag tag;
  EXPECT_MT_ERROR(mt::memory::allocate(16, absent, tag), "cuda");
}

}  // namespace
