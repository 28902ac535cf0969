// The device region of CUDA on the host (device_memory.h): one reservation of address space, carved
// first-fit in 256-byte units; protection flipped for the whole used part at once (one mprotect per
// transition, not one per allocation: a training step launches hundreds of kernels over hundreds of
// allocations). The cost is the kernel's page-table walk over the used part, twice per launch, so the
// quarantine is kept small: a model's placement run on the host spends about as long in mprotect as
// in its kernels.
#include "backends/cuda/host/device_memory.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "backends/cuda/host/sanitizer.h"
#if defined(MT_HOST_ASAN)
#include <sanitizer/asan_interface.h>
#define MT_POISON(p, n) __asan_poison_memory_region((p), (n))
#define MT_UNPOISON(p, n) __asan_unpoison_memory_region((p), (n))
#else
#define MT_POISON(p, n) ((void)(p), (void)(n))
#define MT_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace mixtrain::cuda_host {
namespace {

constexpr size_t kAlign = 256;                           // cudaMalloc's alignment
constexpr size_t kReserved = size_t{64} << 30;           // address space only (MAP_NORESERVE)
constexpr size_t kQuarantineBytes = size_t{16} << 20;    // freed bytes held back from reuse

struct Region {
  std::mutex mutex;
  char* base = nullptr;
  size_t page = 4096;
  size_t high_water = 0;                 // bytes of the region ever handed out (page-rounded)
  std::map<size_t, size_t> free_blocks;  // offset -> size, coalesced, below high_water
  std::map<size_t, size_t> live;         // offset -> size as rounded to kAlign
  std::deque<std::pair<size_t, size_t>> quarantine;
  size_t quarantined = 0;
  int access_depth = 0;
  struct sigaction previous_segv {};
};

Region& region();

const char* kTouchMessage =
    "CUDA on the host: host code touched device memory (an address cudaMalloc returned, outside a kernel, a "
    "copy, a memset or a library call); on a GPU this read or write would fault. The stack follows.\n";

void on_segv(int sig, siginfo_t* info, void* context) {
  Region& r = region();
  const char* addr = static_cast<const char*>(info->si_addr);
  if (r.base != nullptr && addr >= r.base && addr < r.base + kReserved) {
    ssize_t ignored = write(STDERR_FILENO, kTouchMessage, std::strlen(kTouchMessage));
    (void)ignored;
#if !defined(MT_HOST_ASAN)
    void* frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
#endif
  }
  // The previous handler (AddressSanitizer's report, or the default action) takes the fault again
  // when the instruction is retried.
  sigaction(SIGSEGV, &r.previous_segv, nullptr);
  (void)sig;
  (void)context;
}

Region& region() {
  static Region* r = [] {
    auto* made = new Region;  // never destroyed: device memory may be freed during static destruction
    made->page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* p = mmap(nullptr, kReserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) made->base = static_cast<char*>(p);
    struct sigaction action {};
    action.sa_sigaction = on_segv;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &made->previous_segv);
    return made;
  }();
  return *r;
}

// Caller holds the mutex. The used part of the region follows access_depth.
void protect_used(Region& r) {
  if (r.high_water > 0)
    mprotect(r.base, r.high_water, r.access_depth > 0 ? PROT_READ | PROT_WRITE : PROT_NONE);
}

void release(Region& r, size_t offset, size_t size) {
  auto next = r.free_blocks.lower_bound(offset);
  if (next != r.free_blocks.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      r.free_blocks.erase(prev);
    }
  }
  if (next != r.free_blocks.end() && offset + size == next->first) {
    size += next->second;
    r.free_blocks.erase(next);
  }
  r.free_blocks[offset] = size;
}

}  // namespace

void* device_malloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  Region& r = region();
  if (r.base == nullptr || bytes > kReserved) return nullptr;
  const size_t size = (bytes + kAlign - 1) / kAlign * kAlign;
  std::lock_guard<std::mutex> guard(r.mutex);
  size_t offset = SIZE_MAX;
  for (auto it = r.free_blocks.begin(); it != r.free_blocks.end(); ++it) {
    if (it->second < size) continue;
    offset = it->first;
    const size_t rest = it->second - size;
    r.free_blocks.erase(it);
    if (rest > 0) r.free_blocks[offset + size] = rest;
    break;
  }
  if (offset == SIZE_MAX) {
    // Grow the used part by whole pages; the new bytes start poisoned and as protected as the rest.
    const size_t start = r.high_water;
    const size_t grown = (start + size + r.page - 1) / r.page * r.page;
    if (grown > kReserved) return nullptr;
    r.high_water = grown;
    if (r.access_depth > 0) mprotect(r.base + start, grown - start, PROT_READ | PROT_WRITE);
    MT_POISON(r.base + start, grown - start);
    offset = start;
    if (grown - start > size) release(r, start + size, grown - start - size);
  }
  r.live[offset] = size;
  MT_UNPOISON(r.base + offset, bytes);  // the alignment padding after it stays poisoned
  return r.base + offset;
}

bool device_free(void* p) {
  if (p == nullptr) return true;
  Region& r = region();
  std::lock_guard<std::mutex> guard(r.mutex);
  if (!is_device_address(p)) return false;
  const size_t offset = static_cast<size_t>(static_cast<char*>(p) - r.base);
  const auto it = r.live.find(offset);
  if (it == r.live.end()) return false;
  const size_t size = it->second;
  r.live.erase(it);
  MT_POISON(r.base + offset, size);
  r.quarantine.emplace_back(offset, size);
  r.quarantined += size;
  while (r.quarantined > kQuarantineBytes) {
    const auto [o, s] = r.quarantine.front();
    r.quarantine.pop_front();
    r.quarantined -= s;
    release(r, o, s);
  }
  return true;
}

bool is_device_address(const void* p) {
  Region& r = region();
  const char* c = static_cast<const char*>(p);
  return r.base != nullptr && c >= r.base && c < r.base + kReserved;
}

DeviceAccess::DeviceAccess() {
  Region& r = region();
  std::lock_guard<std::mutex> guard(r.mutex);
  if (r.access_depth++ == 0) protect_used(r);
}

DeviceAccess::~DeviceAccess() {
  Region& r = region();
  std::lock_guard<std::mutex> guard(r.mutex);
  if (--r.access_depth == 0) protect_used(r);
}

}  // namespace mixtrain::cuda_host
