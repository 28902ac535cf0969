// The device-independent caching allocator (src/core/caching_allocator.h) on a fake device that
// hands out host memory: rounding, the small and large pools and their segment sizes, best fit,
// splitting and merging, per-stream reuse, the out-of-memory retry and error, exact byte accounting,
// and that blocks never overlap. The CUDA backend uses the same code over cudaMalloc, so everything
// about the cache is tested here, on every machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "core/caching_allocator.h"
#include "support/expect_error.h"

namespace mt = mixtrain;

namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;
constexpr int64_t kStream = 0;

// Device memory from the host heap: 512-byte aligned like a (more than) cudaMalloc'd pointer. It
// counts every call, checks that each release names a live allocation with its size, and can be
// given a byte budget beyond which it reports out of memory the way cudaMalloc does (nullptr).
class FakeDevice final : public mt::RawDeviceMemory {
 public:
  explicit FakeDevice(size_t budget = std::numeric_limits<size_t>::max()) : budget_(budget) {}
  ~FakeDevice() override {
    // The allocator (declared after this fake, so destroyed first) must have returned everything.
    EXPECT_EQ(held_bytes_, 0u) << live_.size() << " segments never released";
    for (auto& [p, n] : live_) std::free(p);
  }

  void* allocate(size_t nbytes) override {
    requests.push_back(nbytes);
    if (nbytes > budget_ - held_bytes_) return nullptr;
    void* p = std::aligned_alloc(512, nbytes);
    if (p == nullptr) return nullptr;
    live_[p] = nbytes;
    held_bytes_ += nbytes;
    ++allocations;
    return p;
  }
  void release(void* ptr, size_t nbytes) override {
    auto it = live_.find(ptr);
    ASSERT_NE(it, live_.end()) << "release of a pointer the device never handed out";
    EXPECT_EQ(it->second, nbytes) << "release with a size other than the allocation's";
    held_bytes_ -= it->second;
    std::free(ptr);
    live_.erase(it);
    ++releases;
  }
  void synchronize() override { ++synchronizations; }

  size_t held_bytes() const { return held_bytes_; }
  // The segment that holds `p`: its base and size (a null base when none does).
  std::pair<const char*, size_t> segment_of(const void* p) const {
    const auto addr = reinterpret_cast<uintptr_t>(p);
    for (const auto& [base, n] : live_) {
      const auto b = reinterpret_cast<uintptr_t>(base);
      if (addr >= b && addr < b + n) return {static_cast<const char*>(base), n};
    }
    return {nullptr, 0};
  }

  std::vector<size_t> requests;  // every size asked for, successful or not
  int allocations = 0;
  int releases = 0;
  int synchronizations = 0;

 private:
  size_t budget_;
  size_t held_bytes_ = 0;
  std::map<void*, size_t> live_;
};

ptrdiff_t distance(const void* from, const void* to) {
  return static_cast<const char*>(to) - static_cast<const char*>(from);
}

TEST(CachingAllocator, RoundsSizesUpTo512Bytes) {
  FakeDevice dev;
  mt::CachingAllocator a(dev, "cuda:0");
  // Consecutive blocks carved from one fresh segment sit one rounded size apart.
  void* p1 = a.allocate(1, kStream);
  void* p2 = a.allocate(513, kStream);
  void* p3 = a.allocate(512, kStream);
  void* p4 = a.allocate(0, kStream);
  void* p5 = a.allocate(1, kStream);
  EXPECT_EQ(distance(p1, p2), 512);
  EXPECT_EQ(distance(p2, p3), 1024);
  EXPECT_EQ(distance(p3, p4), 512);
  EXPECT_EQ(distance(p4, p5), 512);
  // The cache holds the segment minus the rounded sizes.
  EXPECT_EQ(a.stats().cached_bytes, static_cast<int64_t>(2 * kMiB - 512 - 1024 - 512 - 512 - 512));
  for (void* p : {p1, p2, p3, p4, p5}) a.deallocate(p);
}

TEST(CachingAllocator, SmallRequestsShareOne2MiBSegment) {
  FakeDevice dev;
  mt::CachingAllocator a(dev, "cuda:0");
  void* p1 = a.allocate(1000, kStream);
  ASSERT_EQ(dev.requests, std::vector<size_t>{2 * kMiB});
  void* p2 = a.allocate(300 * kKiB, kStream);
  void* p3 = a.allocate(800 * kKiB, kStream);  // still fits what is left (947 KiB after it)
  EXPECT_EQ(dev.allocations, 1);
  EXPECT_EQ(dev.segment_of(p2).first, dev.segment_of(p1).first);
  EXPECT_EQ(dev.segment_of(p3).first, dev.segment_of(p1).first);
  const mt::CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(s.device_allocations, 1);
  EXPECT_EQ(s.allocations, 3);
  // Exactly 1 MiB is still small: a second 2 MiB segment, since the first has under 1 MiB left.
  void* p4 = a.allocate(1 * kMiB, kStream);
  EXPECT_EQ(dev.requests.back(), 2 * kMiB);
  EXPECT_EQ(dev.allocations, 2);
  for (void* p : {p1, p2, p3, p4}) a.deallocate(p);
}

TEST(CachingAllocator, FreedBlockIsReusedWithoutADeviceAllocation) {
  FakeDevice dev;
  mt::CachingAllocator a(dev, "cuda:0");
  void* p = a.allocate(4096, kStream);
  a.deallocate(p);
  void* q = a.allocate(4096, kStream);
  EXPECT_EQ(q, p);
  EXPECT_EQ(dev.allocations, 1);
  EXPECT_EQ(a.stats().device_allocations, 1);
  a.deallocate(q);
}

TEST(CachingAllocator, TrainingStepPatternReachesASteadyState) {
  FakeDevice dev;
  mt::CachingAllocator a(dev, "cuda:0");
  // Parameters, activations and gradients of a small model: both pools, every segment kind.
  const std::vector<size_t> sizes = {
      4 * kMiB,  4096, 100,       3 * kMiB + 17, 12 * kMiB,    700 * kKiB, 2, 1 * kMiB, 5 * kMiB,
      64 * kKiB, 1000, 31 * kMiB, 6 * kMiB,      1 * kMiB + 1, 200 * kKiB, 0, 8 * kMiB, 333 * kKiB};
  int64_t after_first = 0;
  for (int step = 0; step < 5; ++step) {
    std::vector<void*> blocks;
    for (size_t n : sizes) blocks.push_back(a.allocate(n, kStream));
    // Free in an order unlike the allocation order, as a backward pass does.
    for (size_t i = 0; i < blocks.size(); i += 2) a.deallocate(blocks[i]);
    for (size_t i = blocks.size() - 1; i < blocks.size(); i -= 2) a.deallocate(blocks[i]);
    if (step == 0) after_first = a.stats().device_allocations;
    SCOPED_TRACE(step);
    EXPECT_EQ(a.stats().device_allocations, after_first) << "a new segment after warm-up";
    EXPECT_EQ(a.stats().current_bytes, 0);
  }
  EXPECT_EQ(a.stats().allocations, static_cast<int64_t>(5 * sizes.size()));
  EXPECT_EQ(a.stats().frees, static_cast<int64_t>(5 * sizes.size()));
  EXPECT_EQ(a.stats().device_frees, 0);
}

TEST(CachingAllocator, BestFitPicksTheSmallestFittingBlock) {
  FakeDevice dev;
  mt::CachingAllocator a(dev, "cuda:0");
  // Three free holes of 64, 16 and 32 KiB, kept apart by live separators so that they do not merge,
  // and the large free rest of the segment after them.
  void* hole64 = a.allocate(64 * kKiB, kStream);
  void* sep1 = a.allocate(512, kStream);
  void* hole16 = a.allocate(16 * kKiB, kStream);
  void* sep2 = a.allocate(512, kStream);
  void* hole32 = a.allocate(32 * kKiB, kStream);
  void* sep3 = a.allocate(512, kStream);
  a.deallocate(hole64);
  a.deallocate(hole16);
  a.deallocate(hole32);
  void* p10 = a.allocate(10 * kKiB, kStream);
  EXPECT_EQ(p10, hole16) << "not the smallest hole that fits";
  void* p20 = a.allocate(20 * kKiB, kStream);
  EXPECT_EQ(p20, hole32);
  void* p40 = a.allocate(40 * kKiB, kStream);
  EXPECT_EQ(p40, hole64);
  // The split-off tail of a hole is reused too: 6 KiB are left after p10.
  void* p6 = a.allocate(6 * kKiB, kStream);
  EXPECT_EQ(distance(hole16, p6), static_cast<ptrdiff_t>(10 * kKiB));
  EXPECT_EQ(dev.allocations, 1);
  for (void* p : {sep1, sep2, sep3, p10, p20, p40, p6}) a.deallocate(p);
}

TEST(CachingAllocator, FreeingEveryBlockMergesTheSegmentBackIntoOne) {
  FakeDevice dev;
  mt::CachingAllocator a(dev, "cuda:0");
  std::vector<void*> blocks;
  for (size_t n : {1000, 20000, 512, 300000, 7, 65536}) blocks.push_back(a.allocate(n, kStream));
  ASSERT_EQ(dev.allocations, 1);
  // Middle blocks first (no free neighbour, then one, then two), the ends last.
  for (size_t i : {2, 4, 3, 1, 5}) a.deallocate(blocks[i]);
  a.empty_cache();
  EXPECT_EQ(a.stats().device_frees, 0) << "a segment with a live block went back to the device";
  EXPECT_EQ(dev.releases, 0);
  a.deallocate(blocks[0]);
  EXPECT_EQ(a.stats().cached_bytes, static_cast<int64_t>(2 * kMiB));
  // Merged: the largest small request fits at the segment start without a new segment.
  void* whole = a.allocate(1 * kMiB, kStream);
  EXPECT_EQ(whole, blocks[0]);
  EXPECT_EQ(dev.allocations, 1);
  a.deallocate(whole);
  a.empty_cache();
  EXPECT_EQ(a.stats().device_frees, 1);
  EXPECT_EQ(dev.releases, 1);
  EXPECT_EQ(dev.held_bytes(), 0u);
  EXPECT_EQ(a.stats().reserved_bytes, 0);
  EXPECT_EQ(a.stats().cached_bytes, 0);
}

TEST(CachingAllocator, EmptyCacheSynchronizesAndReleasesOnlyWholeFreeSegments) {
  FakeDevice dev;
  mt::CachingAllocator a(dev, "cuda:0");
  void* small_live = a.allocate(100, kStream);
  void* small_freed = a.allocate(100, 1);  // its own segment: another stream
  void* large_freed = a.allocate(30 * kMiB, kStream);
  a.deallocate(small_freed);
  a.deallocate(large_freed);
  ASSERT_EQ(dev.allocations, 3);
  a.empty_cache();
  EXPECT_GE(dev.synchronizations, 1) << "segments went back while queued work might still use them";
  EXPECT_EQ(dev.releases, 2);
  EXPECT_EQ(a.stats().reserved_bytes, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(a.stats().cached_bytes, static_cast<int64_t>(2 * kMiB - 512));
  a.deallocate(small_live);
}

TEST(CachingAllocator, BlocksOfOneStreamAreNotReusedByAnother) {
  FakeDevice dev;
  mt::CachingAllocator a(dev, "cuda:0");
  void* p1 = a.allocate(4096, 1);
  a.deallocate(p1);
  void* p2 = a.allocate(4096, 2);
  EXPECT_NE(dev.segment_of(p2).first, dev.segment_of(p1).first);
  EXPECT_EQ(dev.allocations, 2);
  void* p3 = a.allocate(4096, 1);
  EXPECT_EQ(p3, p1) << "stream 1's own block was not reused";
  EXPECT_EQ(dev.allocations, 2);
  // The same for the large pool.
  void* l1 = a.allocate(5 * kMiB, 1);
  a.deallocate(l1);
  void* l2 = a.allocate(5 * kMiB, 2);
  EXPECT_EQ(dev.allocations, 4);
  for (void* p : {p2, p3, l2}) a.deallocate(p);
}

TEST(CachingAllocator, LargeRequestsUpTo10MiBSplitA20MiBSegment) {
  FakeDevice dev;
  mt::CachingAllocator a(dev, "cuda:0");
  void* p1 = a.allocate(5 * kMiB, kStream);
  EXPECT_EQ(dev.requests, std::vector<size_t>{20 * kMiB});
  EXPECT_EQ(a.stats().cached_bytes, static_cast<int64_t>(15 * kMiB));
  void* p2 = a.allocate(5 * kMiB, kStream);
  void* p3 = a.allocate(1 * kMiB + 1, kStream);  // the smallest large request
  EXPECT_EQ(dev.allocations, 1);
  EXPECT_EQ(dev.segment_of(p2).first, dev.segment_of(p1).first);
  EXPECT_EQ(dev.segment_of(p3).first, dev.segment_of(p1).first);
  // Large and small pools are apart: a small request does not split the large segment.
  void* s = a.allocate(1000, kStream);
  EXPECT_EQ(dev.requests.back(), 2 * kMiB);
  EXPECT_NE(dev.segment_of(s).first, dev.segment_of(p1).first);
  // 10 MiB is the largest request that gets a 20 MiB segment.
  void* p4 = a.allocate(10 * kMiB, kStream);
  EXPECT_EQ(dev.requests.back(), 20 * kMiB);
  for (void* p : {p1, p2, p3, s, p4}) a.deallocate(p);
}

TEST(CachingAllocator, RequestsAbove10MiBGetASegmentRoundedTo2MiB) {
  FakeDevice dev;
  mt::CachingAllocator a(dev, "cuda:0");
  void* p1 = a.allocate(30 * kMiB, kStream);
  EXPECT_EQ(dev.requests.back(), 30 * kMiB);
  void* p2 = a.allocate(31 * kMiB, kStream);
  EXPECT_EQ(dev.requests.back(), 32 * kMiB);
  void* p3 = a.allocate(10 * kMiB + 1, kStream);
  EXPECT_EQ(dev.requests.back(), 12 * kMiB);
  EXPECT_EQ(a.stats().reserved_bytes, static_cast<int64_t>(74 * kMiB));
  for (void* p : {p1, p2, p3}) a.deallocate(p);
}

TEST(CachingAllocator, LargeRemainderIsSplitOnlyWhenOver1MiB) {
  FakeDevice dev;
  mt::CachingAllocator a(dev, "cuda:0");
  void* p = a.allocate(12 * kMiB, kStream);
  a.deallocate(p);
  // 11.5 MiB from the free 12 MiB block: a 0.5 MiB remainder is not worth a block of its own.
  void* q = a.allocate(11 * kMiB + 512 * kKiB, kStream);
  EXPECT_EQ(q, p);
  EXPECT_EQ(a.stats().cached_bytes, 0);
  a.deallocate(q);
  // 10.5 MiB leaves 1.5 MiB: split off and cached.
  void* r = a.allocate(10 * kMiB + 512 * kKiB, kStream);
  EXPECT_EQ(r, p);
  EXPECT_EQ(a.stats().cached_bytes, static_cast<int64_t>(1 * kMiB + 512 * kKiB));
  EXPECT_EQ(dev.allocations, 1);
  a.deallocate(r);
}

TEST(CachingAllocator, OutOfMemoryRetryReleasesCachedSegmentsAndSucceeds) {
  FakeDevice dev(24 * kMiB);
  mt::CachingAllocator a(dev, "cuda:0");
  a.deallocate(a.allocate(5 * kMiB, kStream));  // a cached 20 MiB segment
  a.deallocate(a.allocate(100, kStream));       // and a cached 2 MiB one
  ASSERT_EQ(a.stats().reserved_bytes, static_cast<int64_t>(22 * kMiB));
  // Stream 1 cannot use stream 0's blocks, and 12 MiB more do not fit next to the cache.
  void* p = a.allocate(12 * kMiB, 1);
  ASSERT_NE(p, nullptr);
  const mt::CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.alloc_retries, 1);
  EXPECT_EQ(s.ooms, 0);
  EXPECT_EQ(s.device_frees, 2);
  EXPECT_EQ(dev.synchronizations, 1);
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(12 * kMiB));
  EXPECT_EQ(s.current_bytes, static_cast<int64_t>(12 * kMiB));
  a.deallocate(p);
}

TEST(CachingAllocator, TrueOutOfMemoryThrowsWithTheNumbers) {
  FakeDevice dev(8 * kMiB);
  mt::CachingAllocator a(dev, "cuda:3");
  void* live = a.allocate(100, kStream);  // a 2 MiB segment, mostly free but fragmented
  a.deallocate(a.allocate(100, 1));       // a cached 2 MiB segment the retry can give back
  const std::string msg = mt::testing::error_message([&] { a.allocate(5 * kMiB, kStream); });  // needs 20 MiB
  // The device, the request, the bytes in use by tensors, reserved, and free but fragmented.
  for (const char* part : {"out of memory", "cuda:3", "5242880", "100 bytes", "2097152", "2096640"})
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << msg << "' lacks '" << part << "'";
  const mt::CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.ooms, 1);
  EXPECT_EQ(s.alloc_retries, 1);
  EXPECT_EQ(s.device_frees, 1) << "the retry did not give back the cached segment";
  EXPECT_EQ(s.current_bytes, 100);
  EXPECT_EQ(s.allocations, 2) << "a failed request counted as served";
  // The allocator is intact: what fits is still served, from the cache first.
  void* p = a.allocate(1000, kStream);
  EXPECT_EQ(dev.segment_of(p).first, dev.segment_of(live).first);
  void* q = a.allocate(1 * kMiB, kStream);  // a new 2 MiB segment fits the budget
  EXPECT_EQ(a.stats().ooms, 1);
  for (void* b : {live, p, q}) a.deallocate(b);
}

TEST(CachingAllocator, ImpossibleRequestIsAnOutOfMemoryError) {
  FakeDevice dev;
  mt::CachingAllocator a(dev, "cuda:1");
  // No rounding may wrap around to a small size.
  for (size_t n : {std::numeric_limits<size_t>::max(), std::numeric_limits<size_t>::max() - 511, size_t{1} << 63})
    EXPECT_MT_ERROR(a.allocate(n, kStream), "out of memory", "cuda:1");
  EXPECT_EQ(a.stats().current_bytes, 0);
  EXPECT_EQ(a.stats().allocations, 0);
}

TEST(CachingAllocator, CurrentAndPeakCountTheRequestedBytes) {
  FakeDevice dev;
  mt::CachingAllocator a(dev, "cuda:0");
  // A bf16 tensor of N elements counts 2N bytes however the allocator rounds.
  void* p1 = a.allocate(2 * 1001, kStream);
  void* p2 = a.allocate(1, kStream);
  void* p3 = a.allocate(3 * kMiB + 7, kStream);
  void* p4 = a.allocate(0, kStream);
  const int64_t total = 2 * 1001 + 1 + 3 * kMiB + 7;
  EXPECT_EQ(a.stats().current_bytes, total);
  EXPECT_EQ(a.stats().peak_bytes, total);
  a.deallocate(p3);
  EXPECT_EQ(a.stats().current_bytes, 2 * 1001 + 1);
  EXPECT_EQ(a.stats().peak_bytes, total);
  void* p5 = a.allocate(100, kStream);
  EXPECT_EQ(a.stats().current_bytes, 2 * 1001 + 1 + 100);
  EXPECT_EQ(a.stats().peak_bytes, total);
  EXPECT_EQ(a.stats().reserved_bytes, static_cast<int64_t>(22 * kMiB));
  EXPECT_EQ(a.stats().peak_reserved_bytes, static_cast<int64_t>(22 * kMiB));
  for (void* p : {p1, p2, p4, p5}) a.deallocate(p);
  const mt::CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.current_bytes, 0);
  EXPECT_EQ(s.allocations, 5);
  EXPECT_EQ(s.frees, 5);
  EXPECT_EQ(s.cached_bytes, s.reserved_bytes) << "every byte is free again";
}

TEST(CachingAllocator, ResetPeakStartsFromTheCurrentBytes) {
  FakeDevice dev;
  mt::CachingAllocator a(dev, "cuda:0");
  void* big = a.allocate(30 * kMiB, kStream);
  void* small = a.allocate(1000, kStream);
  a.deallocate(big);
  a.empty_cache();
  ASSERT_EQ(a.stats().peak_bytes, static_cast<int64_t>(30 * kMiB + 1000));
  ASSERT_EQ(a.stats().peak_reserved_bytes, static_cast<int64_t>(32 * kMiB));
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_bytes, 1000);
  EXPECT_EQ(a.stats().peak_reserved_bytes, static_cast<int64_t>(2 * kMiB));
  void* more = a.allocate(500, kStream);
  EXPECT_EQ(a.stats().peak_bytes, 1500);
  a.deallocate(more);
  a.deallocate(small);
  EXPECT_EQ(a.stats().peak_bytes, 1500);
}

TEST(CachingAllocator, DeallocateOfAnUnknownPointerThrows) {
  FakeDevice dev;
  mt::CachingAllocator a(dev, "cuda:2");
  int on_the_stack = 0;
  EXPECT_MT_ERROR(a.deallocate(&on_the_stack), "cuda:2");
  char* p = static_cast<char*>(a.allocate(4096, kStream));
  EXPECT_MT_ERROR(a.deallocate(p + 512), "cuda:2");  // inside a block is not a block
  a.deallocate(p);
  EXPECT_MT_ERROR(a.deallocate(p), "cuda:2");  // twice
  a.deallocate(nullptr);                       // like free(nullptr)
  EXPECT_EQ(a.stats().frees, 1);
  EXPECT_EQ(a.stats().current_bytes, 0);
  EXPECT_EQ(a.stats().cached_bytes, static_cast<int64_t>(2 * kMiB)) << "a failed free changed the cache";
}

TEST(CachingAllocator, ZeroByteAllocationsAreDistinctValidBlocks) {
  FakeDevice dev;
  mt::CachingAllocator a(dev, "cuda:0");
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(a.allocate(0, i % 2));
  for (void* p : blocks) EXPECT_NE(p, nullptr);
  std::vector<void*> sorted = blocks;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "two zero-byte blocks share an address";
  EXPECT_EQ(a.stats().current_bytes, 0);
  EXPECT_EQ(a.stats().allocations, 8);
  for (void* p : blocks) a.deallocate(p);
  EXPECT_EQ(a.stats().frees, 8);
}

TEST(CachingAllocator, BlocksAreAlignedAndNeverOverlap) {
  FakeDevice dev;
  mt::CachingAllocator a(dev, "cuda:0");
  struct Live {
    unsigned char* p;
    size_t n;
    unsigned char pattern;
  };
  std::vector<Live> live;
  std::mt19937 rng(42);
  const std::vector<size_t> sizes = {0,         1,        511,          512,          513,       4095,
                                     65536 + 3, 1 * kMiB, 1 * kMiB + 1, 3 * kMiB + 5, 10 * kMiB, 11 * kMiB + 1};
  unsigned char next_pattern = 1;
  auto allocate_one = [&](size_t n, int64_t stream) {
    auto* p = static_cast<unsigned char*>(a.allocate(n, stream));
    const auto [base, segment_size] = dev.segment_of(p);
    ASSERT_NE(base, nullptr) << "a block outside every segment";
    EXPECT_EQ(distance(base, p) % 512, 0) << "block offset not a multiple of 512";
    EXPECT_LE(distance(base, p) + static_cast<ptrdiff_t>(n), static_cast<ptrdiff_t>(segment_size));
    std::memset(p, next_pattern, n);
    live.push_back({p, n, next_pattern});
    next_pattern = static_cast<unsigned char>(next_pattern % 250 + 1);
  };
  // Allocate, free a random third now and then (splits and merges in between), allocate more.
  for (int round = 0; round < 6; ++round) {
    for (int i = 0; i < 20; ++i) allocate_one(sizes[rng() % sizes.size()], static_cast<int64_t>(rng() % 2));
    std::shuffle(live.begin(), live.end(), rng);
    for (size_t k = 0; k < live.size() / 3; ++k) {
      a.deallocate(live.back().p);
      live.pop_back();
    }
  }
  for (const Live& b : live) {
    const bool intact = std::all_of(b.p, b.p + b.n, [&](unsigned char c) { return c == b.pattern; });
    EXPECT_TRUE(intact) << "block of " << b.n << " bytes overwritten by another";
  }
  int64_t requested = 0;
  for (const Live& b : live) requested += static_cast<int64_t>(b.n);
  EXPECT_EQ(a.stats().current_bytes, requested);
  for (const Live& b : live) a.deallocate(b.p);
  EXPECT_EQ(a.stats().current_bytes, 0);
  EXPECT_EQ(a.stats().cached_bytes, a.stats().reserved_bytes);
}

TEST(CachingAllocator, ThreadsAllocatingAndFreeingLeaveNothingInUse) {
  FakeDevice dev;
  mt::CachingAllocator a(dev, "cuda:0");
  constexpr int kIterations = 20000;
  std::atomic<int> ready{0};
  auto work = [&](unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<void*> mine;
    // Both threads start together, so that their calls overlap rather than run one after the other.
    ready.fetch_add(1);
    while (ready.load() < 2) std::this_thread::yield();
    for (int i = 0; i < kIterations; ++i) {
      if (mine.size() < 8 && rng() % 3 != 0) {
        const size_t n = rng() % 4 == 0 ? 1 * kMiB + rng() % (3 * kMiB) : rng() % (64 * kKiB);
        void* p = a.allocate(n, static_cast<int64_t>(rng() % 2));  // both threads share the streams
        static_cast<unsigned char*>(p)[0] = 1;
        if (n > 0) static_cast<unsigned char*>(p)[n - 1] = 1;
        mine.push_back(p);
      } else if (!mine.empty()) {
        const size_t k = rng() % mine.size();
        a.deallocate(mine[k]);
        mine.erase(mine.begin() + static_cast<ptrdiff_t>(k));
      }
    }
    for (void* p : mine) a.deallocate(p);
  };
  std::thread t1(work, 1u);
  std::thread t2(work, 2u);
  t1.join();
  t2.join();
  const mt::CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.current_bytes, 0);
  EXPECT_EQ(s.allocations, s.frees);
  EXPECT_EQ(s.cached_bytes, s.reserved_bytes);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes, 0) << "every segment is whole again and goes back";
  EXPECT_EQ(dev.held_bytes(), 0u);
}

TEST(CachingAllocator, DestructorReleasesEverySegmentEvenWithLiveBlocks) {
  FakeDevice dev;
  {
    mt::CachingAllocator a(dev, "cuda:0");
    a.allocate(100, kStream);                     // leaked: the process is ending
    a.allocate(30 * kMiB, 1);                     // leaked
    a.deallocate(a.allocate(5 * kMiB, kStream));  // cached
    ASSERT_EQ(dev.allocations, 3);
  }
  EXPECT_EQ(dev.releases, 3);
  EXPECT_EQ(dev.held_bytes(), 0u);
}

}  // namespace
