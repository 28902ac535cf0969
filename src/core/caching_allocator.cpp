// The stream-ordered caching allocator of caching_allocator.h: segments from RawDeviceMemory, cut
// into blocks that form a doubly linked list per segment (address order), with the free blocks of
// each pool in an ordered set so that a best-fit search is one lower_bound.
//
// Invariants (under mu_): every block is either in live_ (allocated) or in the free set of its pool
// (free), never both; two neighbouring blocks are never both free (they would have been merged);
// a segment's first block has prev == nullptr and starts at the pointer RawDeviceMemory returned,
// and never moves (splits keep the front, merges keep the lower block), so a block with neither
// prev nor next is a whole segment.
#include "core/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include "mixtrain/error.h"
#include "mixtrain/memory.h"

namespace mixtrain {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;

constexpr size_t kRound = 512;              // block sizes and offsets are multiples of this
constexpr size_t kSmallRequest = 1 * kMiB;  // at most this is served from the small pool
constexpr size_t kSmallSegment = 2 * kMiB;  // the small pool's segment size
constexpr size_t kMidRequest = 10 * kMiB;   // large requests up to this share a kMidSegment
constexpr size_t kMidSegment = 20 * kMiB;
constexpr size_t kLargeRound = 2 * kMiB;         // larger requests get their size rounded to this
constexpr size_t kMinLargeRemainder = 1 * kMiB;  // a large block is split only for a bigger remainder
// Far beyond any device, and small enough that no rounding below overflows or leaves int64_t.
constexpr size_t kMaxRequest = size_t{1} << 48;

// Offsets being multiples of kRound keep every block as aligned as its segment, which
// RawDeviceMemory guarantees to be at least kAlignment.
static_assert(kRound % memory::kAlignment == 0);
static_assert(kSmallSegment % kRound == 0 && kMidSegment % kRound == 0 && kLargeRound % kRound == 0);

constexpr size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// The bytes a request occupies: zero-byte requests get a block too, so that their pointers differ.
size_t block_size_for(size_t nbytes) { return round_up(std::max<size_t>(nbytes, 1), kRound); }

size_t segment_size_for(size_t block_size) {
  if (block_size <= kSmallRequest) return kSmallSegment;
  if (block_size <= kMidRequest) return kMidSegment;
  return round_up(block_size, kLargeRound);
}

// "512 bytes" below 1 KiB, else "1.50 MiB (1572864 bytes)": readable, and exact for a bug report.
std::string format_bytes(uint64_t n) {
  if (n < kKiB) return detail::concat(n, " bytes");
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n) / 1024.0;
  size_t unit = 0;
  while (v >= 1024.0 && unit + 1 < std::size(kUnits)) {
    v /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.2f %s", v, kUnits[unit]);
  return detail::concat(text, " (", n, " bytes)");
}

int64_t as_int(size_t n) { return static_cast<int64_t>(n); }

}  // namespace

struct CachingAllocator::Block {
  char* ptr = nullptr;
  size_t size = 0;       // bytes of the block, a multiple of kRound
  size_t requested = 0;  // bytes the caller asked for, while allocated
  int64_t stream = 0;    // the stream of the segment; all its blocks share it
  bool small = false;    // the pool of the segment
  bool allocated = false;
  Block* prev = nullptr;  // neighbours in the same segment, in address order
  Block* next = nullptr;
};

bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  // Lowest address first among equal sizes: reuse stays compact and deterministic.
  return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
}

CachingAllocator::CachingAllocator(RawDeviceMemory& raw, std::string device_name)
    : raw_(raw), device_name_(std::move(device_name)) {}

CachingAllocator::~CachingAllocator() {
  // Every block is in live_ or a free set. Gather them all, give each segment back through its first
  // block (the sum of its blocks' sizes is the segment size), then delete the records.
  std::vector<Block*> blocks;
  blocks.reserve(live_.size() + small_free_.size() + large_free_.size());
  for (const auto& [ptr, b] : live_) blocks.push_back(b);
  blocks.insert(blocks.end(), small_free_.begin(), small_free_.end());
  blocks.insert(blocks.end(), large_free_.begin(), large_free_.end());
  for (Block* b : blocks) {
    if (b->prev != nullptr) continue;
    size_t segment_size = 0;
    for (const Block* s = b; s != nullptr; s = s->next) segment_size += s->size;
    raw_.release(b->ptr, segment_size);
  }
  for (Block* b : blocks) delete b;
}

CachingAllocator::FreeBlocks& CachingAllocator::pool_of(const Block* b) { return b->small ? small_free_ : large_free_; }

void* CachingAllocator::allocate(size_t nbytes, int64_t stream) {
  std::lock_guard lock(mu_);
  if (nbytes > kMaxRequest) [[unlikely]] {
    ++stats_.ooms;
    MT_FAIL("out of memory on ", device_name_, ": tried to allocate ", format_bytes(nbytes),
            ", more than any device holds (a negative size converted to size_t?)");
  }
  const size_t size = block_size_for(nbytes);
  const bool small = size <= kSmallRequest;
  Block* b = take_free_block(small ? small_free_ : large_free_, stream, size);
  if (b == nullptr) b = new_segment(small, stream, size, nbytes);
  split(b, size);
  b->allocated = true;
  b->requested = nbytes;
  live_.emplace(b->ptr, b);

  ++stats_.allocations;
  stats_.cached_bytes -= as_int(b->size);
  stats_.current_bytes += as_int(nbytes);
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  return b->ptr;
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mu_);
  auto it = live_.find(ptr);
  MT_CHECK(it != live_.end(), "deallocate: ", ptr, " is not a live block of the ", device_name_,
           " caching allocator (freed twice, not the start of a block, or from another allocator)");
  Block* b = it->second;
  live_.erase(it);
  ++stats_.frees;
  stats_.current_bytes -= as_int(b->requested);
  stats_.cached_bytes += as_int(b->size);
  free_block(b);
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mu_);
  // Queued work may still read a block freed on the host; its segment may only go once that is done.
  raw_.synchronize();
  release_free_segments();
}

CachingAllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mu_);
  stats_.peak_bytes = stats_.current_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

CachingAllocator::Block* CachingAllocator::take_free_block(FreeBlocks& pool, int64_t stream, size_t size) {
  // The first block at or after (stream, size, address 0) is the smallest of this stream that fits.
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::new_segment(bool small, int64_t stream, size_t size, size_t nbytes) {
  const size_t segment_size = segment_size_for(size);
  // The record first: if it cannot be made, no device memory is lost.
  auto head = std::make_unique<Block>();
  head->ptr = static_cast<char*>(allocate_segment_memory(segment_size, nbytes, stream));
  head->size = segment_size;
  head->stream = stream;
  head->small = small;

  ++stats_.device_allocations;
  stats_.reserved_bytes += as_int(segment_size);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  stats_.cached_bytes += as_int(segment_size);  // free until allocate() takes its part
  return head.release();
}

void* CachingAllocator::allocate_segment_memory(size_t segment_size, size_t nbytes, int64_t stream) {
  void* p = raw_.allocate(segment_size);
  if (p == nullptr) {
    // Cached segments of other streams, or of the other pool, may be what the device lacks. They can
    // go back once the work queued on them has finished.
    ++stats_.alloc_retries;
    raw_.synchronize();
    release_free_segments();
    p = raw_.allocate(segment_size);
    if (p == nullptr) fail_out_of_memory(nbytes, segment_size, stream);
  }
  const bool aligned = reinterpret_cast<uintptr_t>(p) % memory::kAlignment == 0;
  if (!aligned) raw_.release(p, segment_size);
  MT_INTERNAL_ASSERT(aligned, "the device memory of ", device_name_, " returned ", p, ", not aligned to ",
                     memory::kAlignment, " bytes");
  return p;
}

void CachingAllocator::split(Block* b, size_t size) {
  const size_t remainder = b->size - size;
  // A small remainder in the large pool would only serve requests of the small pool's sizes, which
  // never come here; leaving it in the block costs at most 1 MiB of a > 1 MiB block.
  const bool worth_keeping = b->small ? remainder >= kRound : remainder > kMinLargeRemainder;
  if (!worth_keeping) return;
  auto* rest = new Block;
  rest->ptr = b->ptr + size;
  rest->size = remainder;
  rest->stream = b->stream;
  rest->small = b->small;
  rest->prev = b;
  rest->next = b->next;
  if (b->next != nullptr) b->next->prev = rest;
  b->next = rest;
  b->size = size;
  pool_of(rest).insert(rest);
}

void CachingAllocator::free_block(Block* b) {
  b->allocated = false;
  b->requested = 0;
  FreeBlocks& pool = pool_of(b);
  // Neighbours leave the set before their size changes: the size is part of the key.
  if (Block* prev = b->prev; prev != nullptr && !prev->allocated) {
    pool.erase(prev);
    prev->size += b->size;
    prev->next = b->next;
    if (b->next != nullptr) b->next->prev = prev;
    delete b;
    b = prev;
  }
  if (Block* next = b->next; next != nullptr && !next->allocated) {
    pool.erase(next);
    b->size += next->size;
    b->next = next->next;
    if (next->next != nullptr) next->next->prev = b;
    delete next;
  }
  pool.insert(b);
}

void CachingAllocator::release_free_segments() {
  for (FreeBlocks* pool : {&small_free_, &large_free_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev != nullptr || b->next != nullptr) {
        ++it;  // part of a segment that still has a live block
        continue;
      }
      raw_.release(b->ptr, b->size);  // first: if it throws, the segment stays cached and accounted
      it = pool->erase(it);
      ++stats_.device_frees;
      stats_.reserved_bytes -= as_int(b->size);
      stats_.cached_bytes -= as_int(b->size);
      delete b;
    }
  }
}

void CachingAllocator::fail_out_of_memory(size_t nbytes, size_t segment_size, int64_t stream) {
  ++stats_.ooms;
  // After the retry every whole free segment is gone: what is still cached sits in segments that
  // also hold live blocks, and nothing but freeing those blocks gives it back.
  MT_FAIL("out of memory on ", device_name_, ": tried to allocate ", format_bytes(nbytes), " on stream ", stream,
          ", which needs a new segment of ", format_bytes(segment_size), "; ",
          format_bytes(static_cast<uint64_t>(stats_.current_bytes)), " in use by tensors, ",
          format_bytes(static_cast<uint64_t>(stats_.reserved_bytes)), " reserved in segments (",
          format_bytes(static_cast<uint64_t>(stats_.cached_bytes)),
          " of them free but fragmented, or cached for other streams). The unused cached segments were already "
          "returned to the device, so memory::empty_cache() will not help here: free tensors that are no longer "
          "needed, or use smaller batches");
}

}  // namespace mixtrain
