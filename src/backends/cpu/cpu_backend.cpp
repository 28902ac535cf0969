// The CPU backend's memory side: a size-bucketed caching allocator with exact byte accounting, and
// memcpy for transfers.
//
// Freed blocks go back to a per-size free list so that a steady-state training step, which frees
// and allocates the same sizes every iteration, does not reach the system allocator. Sizes are
// rounded up to a 64-byte multiple (small) or to a multiple of 1/8 of the next power of two (large),
// so the cache can serve nearby sizes without wasting more than 25%. Accounting always uses the bytes
// the caller asked for, so "a bf16 tensor of N elements costs 2N bytes" holds exactly.
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "mixtrain/error.h"
#include "mixtrain/memory.h"

namespace mixtrain {
using memory::kAlignment;
using memory::Stats;
namespace {

size_t round_size(size_t n) {
  if (n <= 4096) return (n + kAlignment - 1) / kAlignment * kAlignment;
  size_t p = 1;
  while (p < n) p <<= 1;
  size_t step = p / 8;  // four size classes between p/2 and p: at most 25% over the request
  return (n + step - 1) / step * step;
}

class CpuAllocator {
 public:
  void* allocate(size_t nbytes) {
    std::lock_guard lock(mu_);
    size_t rounded = round_size(nbytes == 0 ? 1 : nbytes);
    void* p = nullptr;
    auto it = free_.find(rounded);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= static_cast<int64_t>(rounded);
    } else {
      p = std::aligned_alloc(kAlignment, rounded);
      if (p == nullptr) {
        release_cache_locked();
        p = std::aligned_alloc(kAlignment, rounded);
      }
      MT_CHECK(p != nullptr, "out of memory: could not allocate ", nbytes, " bytes on cpu (", stats_.current_bytes,
               " bytes in use)");
      ++stats_.system_allocations;
    }
    ++stats_.allocations;
    stats_.current_bytes += static_cast<int64_t>(nbytes);
    if (stats_.current_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.current_bytes;
    return p;
  }

  void deallocate(void* p, size_t nbytes) {
    if (p == nullptr) return;
    std::lock_guard lock(mu_);
    size_t rounded = round_size(nbytes == 0 ? 1 : nbytes);
    free_[rounded].push_back(p);
    stats_.cached_bytes += static_cast<int64_t>(rounded);
    stats_.current_bytes -= static_cast<int64_t>(nbytes);
    ++stats_.frees;
  }

  Stats stats() {
    std::lock_guard lock(mu_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard lock(mu_);
    stats_.peak_bytes = stats_.current_bytes;
  }
  void empty_cache() {
    std::lock_guard lock(mu_);
    release_cache_locked();
  }

 private:
  void release_cache_locked() {
    for (auto& [size, blocks] : free_)
      for (void* b : blocks) std::free(b);
    free_.clear();
    stats_.cached_bytes = 0;
  }

  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  Stats stats_;
};

CpuAllocator& cpu_allocator() {
  // Leaked on purpose: tensors with static storage duration may be freed after main returns.
  static auto* a = new CpuAllocator();
  return *a;
}

class CpuBackend final : public Backend {
 public:
  constexpr CpuBackend() = default;
  const char* name() const override { return "cpu"; }
  void* allocate(size_t nbytes, Stream) override { return cpu_allocator().allocate(nbytes); }
  void deallocate(void* ptr, size_t nbytes, Stream) override { cpu_allocator().deallocate(ptr, nbytes); }
  Stats stats(Device) override { return cpu_allocator().stats(); }
  void reset_peak(Device) override { cpu_allocator().reset_peak(); }
  void empty_cache(Device) override { cpu_allocator().empty_cache(); }
  void copy_to_host(void* dst, const void* src, size_t nbytes, Device) override { copy_bytes(dst, src, nbytes); }
  void copy_from_host(void* dst, const void* src, size_t nbytes, Device) override { copy_bytes(dst, src, nbytes); }
  void synchronize(Device) override {}
  void* host_address(void* ptr, Device) const override { return ptr; }

 private:
  static void copy_bytes(void* dst, const void* src, size_t nbytes) {
    if (nbytes != 0) std::memcpy(dst, src, nbytes);
  }
};

constinit CpuBackend the_backend;

}  // namespace

namespace cpu {
Backend& backend() { return the_backend; }
}  // namespace cpu

}  // namespace mixtrain
