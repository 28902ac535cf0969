// A stream-ordered caching allocator for device memory, in plain C++ so that it builds and is tested
// on machines without a GPU; the CUDA backend puts it over cudaMalloc/cudaFree.
//
// Why cache: cudaMalloc and cudaFree are slow and cudaFree synchronises the device, so a training
// step that frees and re-allocates the same tensors every iteration must not reach them. After the
// first step the cache serves every request (stats().device_allocations stops growing).
//
// Behaviour (the design of PyTorch's CUDA caching allocator, reimplemented):
//  - Sizes round up to a multiple of 512 bytes (0 bytes too: a zero-byte request gets its own
//    512-byte block, so its pointer is unique and non-null).
//  - Two pools. Requests of at most 1 MiB are "small" and are carved from 2 MiB segments; larger
//    ones are "large": up to 10 MiB they split a 20 MiB segment, above 10 MiB the segment is the
//    request rounded up to 2 MiB. Keeping small tensors out of large segments limits fragmentation.
//  - Best fit: a request takes the smallest free block of its pool and stream that fits. The rest of
//    the block is split off as a new free block when worth keeping (small pool: any remainder;
//    large pool: more than 1 MiB, else the request keeps the whole block). A freed block merges with
//    its free neighbours in the same segment, so a segment whose blocks are all free is whole again.
//  - Streams: a block belongs to the stream it was allocated on and is only reused by requests on
//    that stream. Work on one stream runs in order, so a block freed on the host may be handed to the
//    next request at once, without a device synchronisation, even while the kernels queued before the
//    free still read it. Use on another stream needs the backend to order the streams first.
//  - Out of memory: when the device refuses a new segment, the allocator synchronises the device,
//    returns every whole free segment (both pools, all streams) and retries once. If that fails too
//    it throws mt::Error naming the device, the request and the bytes in use, reserved and free but
//    fragmented. The allocator stays usable afterwards.
//  - Accounting: current/peak bytes count the bytes requested, not the rounded block sizes, so a
//    bf16 tensor of N elements counts 2N bytes (the contract of mixtrain/memory.h). reserved bytes
//    count the segments held from the device.
//  - Alignment: block offsets within a segment are multiples of 512, so every block is as aligned as
//    its segment start, capped at 512. cudaMalloc returns at least 256-byte aligned pointers, more
//    than memory::kAlignment (64); a RawDeviceMemory must return at least kAlignment-aligned ones.
//
// Thread-safe: one mutex guards everything, and RawDeviceMemory is only called with it held (so a
// RawDeviceMemory needs no lock of its own and must not call back into the allocator).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

namespace mixtrain {

// Where the caching allocator gets device memory: cudaMalloc/cudaFree in the CUDA backend, a fake
// over host memory in the tests.
class RawDeviceMemory {
 public:
  virtual ~RawDeviceMemory() = default;
  // `nbytes` bytes of device memory, at least memory::kAlignment-aligned (cudaMalloc gives >= 256);
  // nullptr when the device is out of memory. Other failures may throw; the cache stays consistent.
  virtual void* allocate(size_t nbytes) = 0;
  // Returns a pointer from allocate() with the size it was allocated with. May throw (the segment
  // then stays cached), except from ~CachingAllocator, where a throw ends the process.
  virtual void release(void* ptr, size_t nbytes) = 0;
  // Waits until all queued device work has finished, so that cached blocks which that work may still
  // use can go back to the device. Called by empty_cache() and before the out-of-memory retry.
  virtual void synchronize() {}
};

struct CachingAllocatorStats {
  int64_t current_bytes = 0;        // bytes requested by live blocks (memory::Stats::current_bytes)
  int64_t peak_bytes = 0;           // maximum of current_bytes since construction or reset_peak()
  int64_t reserved_bytes = 0;       // bytes held in segments from RawDeviceMemory
  int64_t peak_reserved_bytes = 0;  // maximum of reserved_bytes since construction or reset_peak()
  int64_t allocations = 0;          // requests served
  int64_t frees = 0;                // blocks deallocated
  int64_t device_allocations = 0;   // segments obtained from RawDeviceMemory (flat in a steady state)
  int64_t device_frees = 0;         // segments returned to RawDeviceMemory
  int64_t cached_bytes = 0;         // bytes in free blocks: reserved minus the (rounded) blocks in use
  int64_t alloc_retries = 0;        // device allocations retried after releasing the cache
  int64_t ooms = 0;                 // requests that failed with out of memory
};

class CachingAllocator {
 public:
  // `device_name` (e.g. "cuda:0") names the device in error messages. `raw` must outlive this.
  CachingAllocator(RawDeviceMemory& raw, std::string device_name);
  // Releases every segment, including those with live blocks: it runs when the process ends, and
  // tensors still alive then are not used again.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `nbytes` bytes (0 allowed) for work on `stream`. Throws mt::Error when the
  // device is out of memory even after the cache has been given back.
  void* allocate(size_t nbytes, int64_t stream);
  // Returns a block to the cache of the stream it was allocated on. nullptr is ignored; a pointer
  // that is not a live block of this allocator throws mt::Error.
  void deallocate(void* ptr);
  // Synchronises the device and returns every whole free segment to it. Segments with a live block
  // stay: freeing does not move tensors.
  void empty_cache();
  CachingAllocatorStats stats() const;
  // peak_bytes = current_bytes, peak_reserved_bytes = reserved_bytes.
  void reset_peak();

 private:
  struct Block;
  // Orders free blocks by (stream, size, address): a lower_bound on (stream, size) is the best fit.
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeBlocks = std::set<Block*, BlockOrder>;

  FreeBlocks& pool_of(const Block* b);
  Block* take_free_block(FreeBlocks& pool, int64_t stream, size_t size);
  Block* new_segment(bool small, int64_t stream, size_t size, size_t nbytes);
  void* allocate_segment_memory(size_t segment_size, size_t nbytes, int64_t stream);
  void split(Block* b, size_t size);
  void free_block(Block* b);
  void release_free_segments();
  [[noreturn]] void fail_out_of_memory(size_t nbytes, size_t segment_size, int64_t stream);

  RawDeviceMemory& raw_;
  const std::string device_name_;
  mutable std::mutex mu_;
  FreeBlocks small_free_;
  FreeBlocks large_free_;
  std::unordered_map<void*, Block*> live_;  // allocated blocks by address
  CachingAllocatorStats stats_;
};

}  // namespace mixtrain
