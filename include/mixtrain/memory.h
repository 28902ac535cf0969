// mixtrain/memory.h: byte accounting for tensor storage.
//
// Every tensor's storage comes from one allocator per device, which counts the bytes the tensors
// asked for: a bf16 tensor of N elements counts 2N bytes, however the allocator rounds or caches.
// Blocks are 64-byte aligned (a cache line, and the widest AVX-512 load).
#pragma once

#include <cstddef>
#include <cstdint>

#include "mixtrain/device.h"

namespace mixtrain::memory {

inline constexpr size_t kAlignment = 64;

struct Stats {
  int64_t current_bytes = 0;  // bytes held by live storages
  int64_t peak_bytes = 0;     // maximum of current_bytes since start or the last reset_peak()
  int64_t allocations = 0;    // storage allocations served since start
  int64_t frees = 0;          // storage deallocations since start
  int64_t system_allocations = 0;  // of those, how many reached the system allocator (the rest came from the cache)
  int64_t cached_bytes = 0;        // bytes held in the cache, ready for reuse (not counted in current_bytes)
};

Stats stats(Device device = Device{});
void reset_peak(Device device = Device{});
// Returns cached blocks to the system; current and peak are unchanged.
void empty_cache(Device device = Device{});

// Raw allocation through the accounted allocator (what Storage uses). `nbytes` may be 0.
void* allocate(size_t nbytes, Device device);
void deallocate(void* ptr, size_t nbytes, Device device);

}  // namespace mixtrain::memory
