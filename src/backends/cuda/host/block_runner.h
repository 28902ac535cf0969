// The execution engine of CUDA on the host (docs/cuda.md, "CUDA on the host"): a kernel launch runs
// each block's threads as fibers on the calling thread, one block after another, and checks what a
// GPU leaves undefined instead of reporting it:
//   * every thread of a block reaches the same __syncthreads (the kernel and both barrier sites are
//     named otherwise; a thread that returns while others wait at a barrier is an error too);
//   * a warp-synchronous op (shuffle, ballot, any/all) is entered by exactly the lanes its mask names,
//     at the same site; a shuffle reads only lanes of its mask; width is a power of two <= 32;
//   * launch limits of sm_90: 1024 threads per block, block (1024, 1024, 64), grid (2^31-1, 65535,
//     65535), dynamic shared memory above 48 KiB only after the kernel's attribute allows it, never
//     above 227 KiB;
//   * 8- and 16-byte vector accesses are aligned (x86 would tolerate what a GPU faults on).
// Dynamic shared memory is a heap block per launch, so AddressSanitizer sees accesses past it.
//
// Why fibers: the threads of a block must interleave at barriers and warp ops in an order the test
// chooses (in order, reversed, seeded random) so that a missing barrier changes results instead of
// passing by luck; fibers make every schedule deterministic and cost a context switch per barrier
// per thread, where OS threads would cost a kernel round trip and give up the choice of order.
// A thread runs until it reaches a barrier or a warp op, or returns; the scheduler then resolves
// warp ops (all lanes of a warp waiting) and barriers (all threads of the block waiting).
//
// Blocks run one at a time, so `static` storage behaves as __shared__ does within a block. Real
// concurrency, the memory model, occupancy and speed are not modelled (docs/cuda.md lists what only a
// GPU proves).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>

namespace mixtrain::cuda_host {

// Where a barrier or warp op is called from. std::source_location would do, but clang 14 (the fuzz
// build's compiler) lacks the built-in that libstdc++ 12's needs; these built-ins exist in both.
// Two calls on one line count as one site (GCC has no column built-in).
struct Site {
  const char* file = "";
  unsigned line = 0;
  // A default argument: the caller's position.
  static constexpr Site here(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
    return Site{file, line};
  }
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  Dim3() = default;
  Dim3(unsigned x_, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}  // NOLINT: dim3's conversions
  uint64_t count() const { return uint64_t{x} * y * z; }
};

// The order in which the ready threads of a block run between two synchronisation points.
enum class Schedule { kInOrder, kReverse, kRandom };

struct ScheduleChoice {
  Schedule schedule = Schedule::kInOrder;
  uint64_t seed = 0;  // kRandom
};
// "in-order", "reverse", "random" or "random:SEED" (a decimal uint64); mt::Error listing them.
ScheduleChoice parse_schedule(const std::string& text);
// The schedule of the following launches on this thread. The default comes from the environment
// variable MIXTRAIN_CUDA_HOST_SCHEDULE (parse_schedule's spellings; unset: in-order), read once.
void set_schedule(ScheduleChoice choice);
ScheduleChoice schedule();

// The sm_90 limits enforced at launch.
struct Limits {
  static constexpr unsigned kMaxThreadsPerBlock = 1024;
  static constexpr unsigned kMaxBlockX = 1024, kMaxBlockY = 1024, kMaxBlockZ = 64;
  static constexpr uint64_t kMaxGridX = 2147483647u;
  static constexpr unsigned kMaxGridY = 65535, kMaxGridZ = 65535;
  static constexpr size_t kDefaultSharedBytes = 48 * 1024;   // static + dynamic, without opt-in
  static constexpr size_t kOptInSharedBytes = 232448;        // 227 KiB: cudaFuncAttributeMaxDynamicSharedMemorySize
  static constexpr int kWarpSize = 32;
};

// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes): what a launch of
// `kernel` may ask for beyond 48 KiB. mt::Error above 227 KiB.
void set_max_dynamic_shared_bytes(const void* kernel, size_t bytes);

struct LaunchConfig {
  Dim3 grid, block;
  size_t dynamic_shared_bytes = 0;
  size_t static_shared_bytes = 0;  // as the kernel declares them (counted against the limit)
  const void* kernel = nullptr;    // identity for the dynamic-shared attribute
  std::string name;                // in every message
};

// Runs `thread_body` once per thread of every block (in fibers; see above). Checks the launch limits
// first. Any violation, or an mt::Error/std::exception thrown by the body, is an mt::Error naming the
// kernel, the block and the thread; the launch stops at the first one.
void launch(const LaunchConfig& config, const std::function<void()>& thread_body);

// ---- inside a launch (each is an mt::Error outside one)
const Dim3& thread_idx();
const Dim3& block_idx();
const Dim3& block_dim();
const Dim3& grid_dim();
// The launch's dynamic shared memory (extern __shared__), 128-byte aligned; nullptr when none.
void* dynamic_shared();
// Lane of the calling thread within its warp (threads numbered x fastest, then y, then z).
int lane_id();

// __syncthreads(): waits until every thread of the block is at a barrier; all must be at this one.
void syncthreads(Site site = Site::here());

// Warp ops. `mask` must name exactly the lanes that reach this op at this site (checked).
enum class ShuffleKind { kIndex, kUp, kDown, kXor };
// The raw form: `bytes` (<= 16) of `value` exchanged; `arg` is the source lane, delta or lane mask.
void shuffle_bytes(unsigned mask, void* value, size_t bytes, ShuffleKind kind, int arg, int width,
                   Site site);
unsigned ballot(unsigned mask, bool predicate, Site site = Site::here());

template <typename T>
T shuffle(unsigned mask, T value, ShuffleKind kind, int arg, int width = Limits::kWarpSize,
          Site site = Site::here()) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 16, "shuffles move up to 16 trivially copyable bytes");
  shuffle_bytes(mask, &value, sizeof(T), kind, arg, width, site);
  return value;
}

// An 8- or 16-byte vector access at `p` (a float4, uint4, double2, ...): mt::Error unless aligned
// to its size, as the GPU requires.
void check_vector_access(const void* p, size_t bytes, Site site = Site::here());

}  // namespace mixtrain::cuda_host
