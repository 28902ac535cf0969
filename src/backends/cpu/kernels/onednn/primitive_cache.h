// A thread-safe LRU cache of oneDNN primitives, keyed by a descriptor struct.
//
// Creating a oneDNN primitive descriptor and primitive costs tens of microseconds to milliseconds
// (implementation search and JIT code generation); executing a cached one costs nothing extra. Each
// op family keeps one cache keyed by a plain struct of int64 fields that spells out everything the
// primitive depends on (shapes, strides, dtypes, bias, post-ops). Keys are compared and hashed as
// raw words, so a Key must be made of int64_t fields only (no padding bytes) and value-initialised.
//
// Creation runs outside the lock (a slow JIT must not block threads that hit the cache); when two
// threads miss on the same key at once, both create and the second insert is dropped.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <list>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <utility>

namespace mixtrain::kernels::onednn {

// Counters shared by every primitive cache (for tests and diagnostics).
struct CacheCounters {
  std::atomic<int64_t> created{0};
  std::atomic<int64_t> hits{0};
};
CacheCounters& cache_counters();

template <typename Key>
struct KeyOps {
  static_assert(std::is_trivially_copyable_v<Key> && sizeof(Key) % sizeof(int64_t) == 0,
                "primitive cache keys are structs of int64_t fields");
  size_t operator()(const Key& k) const {
    // FNV-1a over the 64-bit words, then a final mix.
    const auto* w = reinterpret_cast<const uint64_t*>(&k);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof(Key) / sizeof(uint64_t); ++i) h = (h ^ w[i]) * 1099511628211ull;
    return static_cast<size_t>(h ^ (h >> 29));
  }
  bool operator()(const Key& a, const Key& b) const { return std::memcmp(&a, &b, sizeof(Key)) == 0; }
};

template <typename Key, typename Value>
class PrimitiveCache {
 public:
  explicit PrimitiveCache(size_t capacity) : capacity_(capacity) {}

  // Returns the cached value for `key`, creating it with make() on a miss.
  template <typename Make>
  Value get(const Key& key, Make&& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second);  // most recently used first
        cache_counters().hits.fetch_add(1, std::memory_order_relaxed);
        return it->second->second;
      }
    }
    Value value = make();
    cache_counters().created.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.find(key) == map_.end()) {
      lru_.emplace_front(key, value);
      map_.emplace(key, lru_.begin());
      if (lru_.size() > capacity_) {
        map_.erase(lru_.back().first);
        lru_.pop_back();
      }
    }
    return value;
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lru_.size();
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    map_.clear();
    lru_.clear();
  }

 private:
  using Entry = std::pair<Key, Value>;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;
  std::unordered_map<Key, typename std::list<Entry>::iterator, KeyOps<Key>, KeyOps<Key>> map_;
};

}  // namespace mixtrain::kernels::onednn
