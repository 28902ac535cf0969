// src/core/prefetch.h (internal): asking rows of a strided view into the cache ahead of their use.
//
// Rows of a strided view (a head's 128-byte slice of every 1536-byte row of GPT-mini's qkv tensor)
// are not followed by the hardware prefetchers, which track streams within a page; a loop over such
// rows that was written long before waits on memory once per row. Issuing a prefetch a few rows
// ahead hides that wait (a bf16 GPT-mini attention pass took ~25% less time on a Zen 4).
#pragma once

#include <cstdint>

namespace mixtrain::detail {

// Rows ahead of the current one that a strided row loop asks for.
inline constexpr int64_t kPrefetchRowsAhead = 8;

// Asks every 64-byte line of [p, p + bytes) into the cache, for reading. A hint: never faults.
inline void prefetch_bytes(const void* p, int64_t bytes) {
  if (bytes <= 0) return;
  const char* c = static_cast<const char*>(p);
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b);
  __builtin_prefetch(c + bytes - 1);  // the last line when `p` is not line-aligned
}

// prefetch_bytes for row r + kPrefetchRowsAhead of `rows` rows of `n` elements, `stride` apart.
template <typename T>
inline void prefetch_row_ahead(const T* base, int64_t stride, int64_t r, int64_t rows, int64_t n) {
  if (r + kPrefetchRowsAhead < rows)
    prefetch_bytes(base + (r + kPrefetchRowsAhead) * stride, n * static_cast<int64_t>(sizeof(T)));
}

}  // namespace mixtrain::detail
