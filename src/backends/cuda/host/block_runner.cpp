// The CUDA-on-host execution engine (block_runner.h): fibers per block, barriers and warp ops
// resolved by the scheduler, every undefined case reported.
#include "backends/cuda/host/block_runner.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <sstream>
#include <vector>

#include "backends/cuda/host/device_memory.h"
#include "mixtrain/error.h"

#include "backends/cuda/host/sanitizer.h"
#ifdef MT_HOST_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace mixtrain::cuda_host {

namespace {

using mixtrain::detail::concat;

// Fiber stacks: kernels keep little on the stack, but the instrumented build's frames are larger.
#ifdef MT_HOST_ASAN
constexpr size_t kStackBytes = 512 * 1024;
#else
constexpr size_t kStackBytes = 128 * 1024;
#endif

// Thrown at a waiting thread's resumption when its block is abandoned: unwinds its stack.
struct Cancelled {};

std::string where(const Site& s) { return concat(s.file, ":", s.line); }
bool same_site(const Site& a, const Site& b) {
  return a.line == b.line && (a.file == b.file || std::strcmp(a.file, b.file) == 0);
}

// A fiber's stack with a guard page below it (an overflow faults instead of corrupting a neighbour).
class Stack {
 public:
  Stack() {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    total_ = kStackBytes + page;
    base_ = ::mmap(nullptr, total_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    MT_CHECK(base_ != MAP_FAILED, "CUDA on the host: cannot map a ", kStackBytes, "-byte fiber stack");
    ::mprotect(base_, page, PROT_NONE);
    bottom_ = static_cast<char*>(base_) + page;
  }
  ~Stack() { ::munmap(base_, total_); }
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  char* bottom() const { return bottom_; }
  size_t size() const { return kStackBytes; }

 private:
  void* base_ = nullptr;
  char* bottom_ = nullptr;
  size_t total_ = 0;
};

// ---- fiber switching. swapcontext saves and restores the signal mask with two system calls per
// switch, which made a kernel with a shuffle per element minutes slow; this switch saves only the
// callee-saved registers (x86-64 System V). The floating-point control words are not switched:
// every fiber runs with the launching thread's (no kernel changes the rounding mode).
#if !defined(__x86_64__)
#error "CUDA on the host switches fibers with x86-64 code (mt_host_fiber_switch); port it for this CPU"
#endif
extern "C" void mt_host_fiber_switch(void** save_sp, void* load_sp);
asm(R"(
    .text
    .globl mt_host_fiber_switch
    .type mt_host_fiber_switch, @function
mt_host_fiber_switch:
    .cfi_startproc
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .cfi_endproc
    .size mt_host_fiber_switch, .-mt_host_fiber_switch
    .section .note.GNU-stack,"",@progbits
    .text
)");

enum class State { kReady, kAtBarrier, kAtWarpOp, kDone };

struct WarpOp {
  bool is_ballot = false;
  ShuffleKind kind = ShuffleKind::kIndex;
  unsigned mask = 0;
  int arg = 0;
  int width = 32;
  size_t bytes = 0;
  unsigned char value[16] = {};
  bool predicate = false;
  unsigned ballot_result = 0;
};

struct Thread {
  void* sp = nullptr;  // saved stack pointer while switched out
  Stack* stack = nullptr;
  State state = State::kReady;
  bool started = false;
  Dim3 index;
  Site site;  // where it waits
  WarpOp op;
  void* asan_fake_stack = nullptr;
};

// One launch's state; blocks reuse the threads and stacks.
struct Launch {
  const LaunchConfig* config = nullptr;
  const std::function<void()>* body = nullptr;
  Dim3 block;
  std::vector<Thread> threads;
  // Dynamic shared memory: exactly the bytes asked for (AddressSanitizer reports the first byte past
  // them), 128-byte aligned as the backend declares it (MT_DYNAMIC_SHARED).
  struct AlignedDelete {
    void operator()(unsigned char* p) const { ::operator delete[](p, std::align_val_t{128}); }
  };
  std::unique_ptr<unsigned char[], AlignedDelete> shared_heap;
  void* scheduler_sp = nullptr;
  int current = -1;
  bool cancelling = false;
  std::optional<std::string> error;
  const void* scheduler_stack_bottom = nullptr;
  size_t scheduler_stack_size = 0;
};

thread_local Launch* g_launch = nullptr;
// Fiber stacks, kept across launches (mapping 1024 of them per launch would dominate small kernels).
thread_local std::vector<std::unique_ptr<Stack>> g_stacks;

Launch& active(const char* what) {
  MT_CHECK(g_launch != nullptr && g_launch->current >= 0, "CUDA on the host: ", what,
           " called outside a kernel launch");
  return *g_launch;
}

std::string thread_name(const Launch& l, int t) {
  const Dim3& i = l.threads[static_cast<size_t>(t)].index;
  return concat("thread (", i.x, ",", i.y, ",", i.z, ")");
}

std::string block_name(const Launch& l) {
  return concat("kernel ", l.config->name.empty() ? "<unnamed>" : l.config->name, ", block (", l.block.x, ",",
                l.block.y, ",", l.block.z, ")");
}

// ---- switching (annotated for AddressSanitizer, which must know which stack is live)

void switch_to_thread(Launch& l, int t) {
  Thread& th = l.threads[static_cast<size_t>(t)];
  l.current = t;
#ifdef MT_HOST_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, th.stack->bottom(), th.stack->size());
#endif
  mt_host_fiber_switch(&l.scheduler_sp, th.sp);
#ifdef MT_HOST_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  l.current = -1;
}

void after_switch_in(Launch& l, Thread& th) {
#ifdef MT_HOST_ASAN
  __sanitizer_finish_switch_fiber(th.asan_fake_stack, &l.scheduler_stack_bottom, &l.scheduler_stack_size);
#else
  (void)l;
  (void)th;
#endif
}

// From a thread back to the scheduler; returns when the scheduler resumes it (or throws Cancelled).
void yield_to_scheduler(Launch& l) {
  Thread& th = l.threads[static_cast<size_t>(l.current)];
#ifdef MT_HOST_ASAN
  __sanitizer_start_switch_fiber(&th.asan_fake_stack, l.scheduler_stack_bottom, l.scheduler_stack_size);
#endif
  mt_host_fiber_switch(&th.sp, l.scheduler_sp);
  Launch& again = *g_launch;
  after_switch_in(again, again.threads[static_cast<size_t>(again.current)]);
  if (again.cancelling) throw Cancelled{};
}

[[noreturn]] void thread_entry() {
  Launch& l = *g_launch;
  Thread& th = l.threads[static_cast<size_t>(l.current)];
  after_switch_in(l, th);
  try {
    if (!l.cancelling) (*l.body)();
  } catch (const Cancelled&) {
  } catch (const std::exception& e) {
    if (!l.error) l.error = concat(block_name(l), ", ", thread_name(l, l.current), ": ", e.what());
  } catch (...) {
    if (!l.error) l.error = concat(block_name(l), ", ", thread_name(l, l.current), ": an unknown exception");
  }
  Launch& done = *g_launch;
  done.threads[static_cast<size_t>(done.current)].state = State::kDone;
#ifdef MT_HOST_ASAN
  __sanitizer_start_switch_fiber(nullptr, done.scheduler_stack_bottom, done.scheduler_stack_size);
#endif
  void* finished = nullptr;  // never resumed
  mt_host_fiber_switch(&finished, done.scheduler_sp);
  __builtin_unreachable();
}

// A fresh stack whose first switch-in "returns" into thread_entry: six callee-saved registers
// (zero) and the return address, laid out as mt_host_fiber_switch pops them, so that thread_entry
// starts with the stack aligned as after a call.
void start_thread(Launch& l, int t) {
  Thread& th = l.threads[static_cast<size_t>(t)];
  const uintptr_t top = reinterpret_cast<uintptr_t>(th.stack->bottom() + th.stack->size()) & ~uintptr_t{15};
  auto* ret_slot = reinterpret_cast<uint64_t*>(top - 16);
  ret_slot[0] = reinterpret_cast<uint64_t>(&thread_entry);
  ret_slot[1] = 0;
  uint64_t* sp = ret_slot - 6;
  for (int i = 0; i < 6; ++i) sp[i] = 0;
  th.sp = sp;
  th.started = true;
}

// ---- resolution

// Lanes of warp `w` as a bitmask relative to the warp.
unsigned lane_bit(int t) { return 1u << (static_cast<unsigned>(t) % 32u); }

// Every group of lanes waiting at one warp op: checks the masks and computes the results. Returns
// whether any lane was released; sets l.error on a violation.
bool resolve_warp_ops(Launch& l) {
  bool released = false;
  const int n = static_cast<int>(l.threads.size());
  for (int w0 = 0; w0 < n && !l.error; w0 += 32) {
    const int w1 = std::min(n, w0 + 32);
    unsigned seen = 0;
    for (int first = w0; first < w1 && !l.error; ++first) {
      const Thread& lead = l.threads[static_cast<size_t>(first)];
      if (lead.state != State::kAtWarpOp || (seen & lane_bit(first)) != 0) continue;
      std::array<int, 32> group;
      int size = 0;
      unsigned arrived = 0;
      for (int t = first; t < w1; ++t) {
        const Thread& th = l.threads[static_cast<size_t>(t)];
        if (th.state == State::kAtWarpOp && same_site(th.site, lead.site)) {
          group[static_cast<size_t>(size++)] = t;
          arrived |= lane_bit(t);
        }
      }
      seen |= arrived;
      const char* op = lead.op.is_ballot ? "__ballot_sync" : "__shfl_*_sync";
      for (int g = 0; g < size; ++g) {
        const int t = group[static_cast<size_t>(g)];
        const WarpOp& o = l.threads[static_cast<size_t>(t)].op;
        if (o.mask != arrived || o.width != lead.op.width || o.kind != lead.op.kind || o.is_ballot != lead.op.is_ballot) {
          std::ostringstream msg;
          msg << block_name(l) << ": " << op << " at " << where(lead.site) << ": lane " << t % 32 << " of warp "
              << w0 / 32 << " gives mask 0x" << std::hex << o.mask << " but the lanes that reached it are 0x"
              << arrived << std::dec
              << " (a mask must name exactly the converged lanes; lanes it names that are elsewhere never arrive)";
          l.error = msg.str();
          return false;
        }
      }
      if (lead.op.is_ballot) {
        unsigned bits = 0;
        for (int g = 0; g < size; ++g)
          if (l.threads[static_cast<size_t>(group[static_cast<size_t>(g)])].op.predicate) bits |= lane_bit(group[static_cast<size_t>(g)]);
        for (int g = 0; g < size; ++g) l.threads[static_cast<size_t>(group[static_cast<size_t>(g)])].op.ballot_result = bits;
      } else {
        // Results from the values as they were on arrival, indexed by lane.
        unsigned char before[32][16];
        for (int g = 0; g < size; ++g) {
          const int t = group[static_cast<size_t>(g)];
          std::memcpy(before[t - w0], l.threads[static_cast<size_t>(t)].op.value, lead.op.bytes);
        }
        for (int g = 0; g < size; ++g) {
          const int t = group[static_cast<size_t>(g)];
          WarpOp& o = l.threads[static_cast<size_t>(t)].op;
          const int lane = t - w0, width = o.width, arg = o.arg;
          const int segment = lane / width * width, offset = lane % width;
          int src = lane;
          switch (o.kind) {
            case ShuffleKind::kIndex: src = segment + ((arg % width) + width) % width; break;
            case ShuffleKind::kUp: src = offset - arg >= 0 ? lane - arg : lane; break;
            case ShuffleKind::kDown: src = offset + arg < width ? lane + arg : lane; break;
            case ShuffleKind::kXor: src = (lane ^ arg) / width == lane / width ? lane ^ arg : lane; break;
          }
          if (src < 0 || src >= 32 || (arrived & (1u << src)) == 0) {
            l.error = concat(block_name(l), ": shuffle at ", where(lead.site), ": lane ", lane, " of warp ", w0 / 32,
                             " reads lane ", src, ", which is not in the mask (its value is undefined)");
            return false;
          }
          std::memcpy(o.value, before[src], o.bytes);
        }
      }
      for (int g = 0; g < size; ++g) l.threads[static_cast<size_t>(group[static_cast<size_t>(g)])].state = State::kReady;
      released = true;
    }
  }
  return released;
}

// All waiting threads at one barrier: released. Otherwise l.error names the two sites.
void resolve_barrier(Launch& l) {
  int first = -1, done = -1;
  for (int t = 0; t < static_cast<int>(l.threads.size()); ++t) {
    const Thread& th = l.threads[static_cast<size_t>(t)];
    if (th.state == State::kDone) {
      if (done < 0) done = t;
      continue;
    }
    if (first < 0) {
      first = t;
      continue;
    }
    const Thread& a = l.threads[static_cast<size_t>(first)];
    if (!same_site(a.site, th.site)) {
      l.error = concat(block_name(l), ": threads wait at different __syncthreads: ", thread_name(l, first), " at ",
                       where(a.site), ", ", thread_name(l, t), " at ", where(th.site),
                       " (every thread of a block must reach the same barrier)");
      return;
    }
  }
  if (first < 0) return;  // all done
  if (done >= 0) {
    l.error = concat(block_name(l), ": ", thread_name(l, done), " returned while ", thread_name(l, first),
                     " waits at __syncthreads at ", where(l.threads[static_cast<size_t>(first)].site),
                     " (every thread of a block must reach each barrier)");
    return;
  }
  for (Thread& th : l.threads) th.state = State::kReady;
}

// The order of the next round: fixed for in-order and reverse, reshuffled for random.
void next_order(std::vector<int>& order, size_t n, Schedule schedule, std::mt19937_64* rng) {
  if (order.size() != n) {
    order.resize(n);
    for (size_t i = 0; i < n; ++i) order[i] = static_cast<int>(i);
    if (schedule == Schedule::kReverse) std::reverse(order.begin(), order.end());
  }
  if (schedule == Schedule::kRandom) std::shuffle(order.begin(), order.end(), *rng);
}

// Resumes every started, unfinished thread with `cancelling` set so that its stack unwinds.
void cancel_block(Launch& l) {
  l.cancelling = true;
  for (int t = 0; t < static_cast<int>(l.threads.size()); ++t) {
    Thread& th = l.threads[static_cast<size_t>(t)];
    if (th.started && th.state != State::kDone) switch_to_thread(l, t);
  }
  l.cancelling = false;
}

void run_block(Launch& l, std::mt19937_64* rng) {
  for (size_t t = 0; t < l.threads.size(); ++t) {
    Thread& th = l.threads[t];
    th.state = State::kReady;
    th.started = false;
    start_thread(l, static_cast<int>(t));
  }
  const Schedule policy = schedule().schedule;
  std::vector<int> order;
  for (;;) {
    next_order(order, l.threads.size(), policy, rng);
    for (int t : order) {
      if (l.threads[static_cast<size_t>(t)].state != State::kReady) continue;
      switch_to_thread(l, t);
      if (l.error) break;
    }
    if (!l.error && resolve_warp_ops(l)) continue;
    if (!l.error) {
      const bool all_done = std::all_of(l.threads.begin(), l.threads.end(),
                                        [](const Thread& th) { return th.state == State::kDone; });
      if (all_done) return;
      resolve_barrier(l);
    }
    if (l.error) {
      cancel_block(l);
      const std::string msg = *l.error;
      MT_FAIL("CUDA on the host: ", msg);
    }
  }
}

struct ScheduleState {
  bool initialised = false;
  ScheduleChoice choice;
};
thread_local ScheduleState g_schedule;

std::mutex g_attribute_mutex;
std::map<const void*, size_t>& dynamic_shared_optin() {
  static std::map<const void*, size_t> m;
  return m;
}

}  // namespace

ScheduleChoice parse_schedule(const std::string& text) {
  ScheduleChoice c;
  if (text == "in-order") return c;
  if (text == "reverse") {
    c.schedule = Schedule::kReverse;
    return c;
  }
  if (text == "random" || text.rfind("random:", 0) == 0) {
    c.schedule = Schedule::kRandom;
    if (text.size() > 6) {  // "random:SEED": the seed must be there
      const std::string digits = text.substr(7);
      MT_CHECK(!digits.empty() && digits.size() <= 19 && std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }),
               "MIXTRAIN_CUDA_HOST_SCHEDULE: the seed of ", mixtrain::detail::quote_untrusted(text),
               " must be a decimal integer below 10^19");
      c.seed = std::stoull(digits);
    }
    return c;
  }
  MT_FAIL("MIXTRAIN_CUDA_HOST_SCHEDULE: ", mixtrain::detail::quote_untrusted(text),
          " is not a schedule: in-order, reverse, random or random:SEED");
}

void set_schedule(ScheduleChoice choice) {
  g_schedule.initialised = true;
  g_schedule.choice = choice;
}

ScheduleChoice schedule() {
  if (!g_schedule.initialised) {
    const char* env = std::getenv("MIXTRAIN_CUDA_HOST_SCHEDULE");
    g_schedule.choice = env != nullptr ? parse_schedule(env) : ScheduleChoice{};
    g_schedule.initialised = true;
  }
  return g_schedule.choice;
}

void set_max_dynamic_shared_bytes(const void* kernel, size_t bytes) {
  MT_CHECK(bytes <= Limits::kOptInSharedBytes, "cudaFuncSetAttribute: ", bytes,
           " bytes of dynamic shared memory is above sm_90's ", Limits::kOptInSharedBytes);
  std::lock_guard<std::mutex> guard(g_attribute_mutex);
  dynamic_shared_optin()[kernel] = bytes;
}

void launch(const LaunchConfig& c, const std::function<void()>& thread_body) {
  const std::string who = concat("CUDA on the host: kernel ", c.name.empty() ? "<unnamed>" : c.name, ": ");
  const Dim3& b = c.block;
  const Dim3& g = c.grid;
  MT_CHECK(b.count() >= 1 && g.count() >= 1, who, "an empty launch: grid (", g.x, ",", g.y, ",", g.z, "), block (",
           b.x, ",", b.y, ",", b.z, ")");
  MT_CHECK(b.count() <= Limits::kMaxThreadsPerBlock, who, "block (", b.x, ",", b.y, ",", b.z, ") has ", b.count(),
           " threads, above sm_90's ", Limits::kMaxThreadsPerBlock);
  MT_CHECK(b.x <= Limits::kMaxBlockX && b.y <= Limits::kMaxBlockY && b.z <= Limits::kMaxBlockZ, who, "block (", b.x,
           ",", b.y, ",", b.z, ") exceeds sm_90's (1024, 1024, 64)");
  MT_CHECK(g.x <= Limits::kMaxGridX && g.y <= Limits::kMaxGridY && g.z <= Limits::kMaxGridZ, who, "grid (", g.x, ",",
           g.y, ",", g.z, ") exceeds sm_90's (2^31-1, 65535, 65535)");
  size_t allowed = Limits::kDefaultSharedBytes;
  {
    std::lock_guard<std::mutex> guard(g_attribute_mutex);
    const auto it = dynamic_shared_optin().find(c.kernel);
    if (c.kernel != nullptr && it != dynamic_shared_optin().end()) allowed = std::max(allowed, it->second);
  }
  MT_CHECK(c.static_shared_bytes + c.dynamic_shared_bytes <= allowed, who, c.dynamic_shared_bytes,
           " bytes of dynamic shared memory (+ ", c.static_shared_bytes, " static) exceed the ", allowed,
           " bytes allowed", allowed == Limits::kDefaultSharedBytes
               ? " without cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)"
               : " by the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize");
  MT_CHECK(g_launch == nullptr, who, "a launch from inside a kernel (dynamic parallelism is not used here)");

  Launch l;
  l.config = &c;
  l.body = &thread_body;
  const size_t n = static_cast<size_t>(b.count());
  l.threads.resize(n);
  while (g_stacks.size() < n) g_stacks.push_back(std::make_unique<Stack>());
  for (size_t t = 0; t < n; ++t) {
    l.threads[t].stack = g_stacks[t].get();
    l.threads[t].index = Dim3(static_cast<unsigned>(t % b.x), static_cast<unsigned>(t / b.x % b.y),
                              static_cast<unsigned>(t / (uint64_t{b.x} * b.y)));
  }
  if (c.dynamic_shared_bytes > 0)
    l.shared_heap.reset(static_cast<unsigned char*>(::operator new[](c.dynamic_shared_bytes, std::align_val_t{128})));
  std::mt19937_64 rng(schedule().seed);
  struct Reset {
    ~Reset() { g_launch = nullptr; }
  } reset;
  g_launch = &l;
  const DeviceAccess access;  // the kernel's threads read and write device memory (device_memory.h)
  for (unsigned z = 0; z < g.z; ++z)
    for (unsigned y = 0; y < g.y; ++y)
      for (uint64_t x = 0; x < g.x; ++x) {
        l.block = Dim3(static_cast<unsigned>(x), y, z);
        run_block(l, &rng);
      }
}

const Dim3& thread_idx() {
  Launch& l = active("threadIdx");
  return l.threads[static_cast<size_t>(l.current)].index;
}
const Dim3& block_idx() { return active("blockIdx").block; }
const Dim3& block_dim() { return active("blockDim").config->block; }
const Dim3& grid_dim() { return active("gridDim").config->grid; }
void* dynamic_shared() { return active("extern __shared__").shared_heap.get(); }
int lane_id() { return active("the lane id").current % Limits::kWarpSize; }

void syncthreads(Site site) {
  Launch& l = active("__syncthreads");
  Thread& th = l.threads[static_cast<size_t>(l.current)];
  th.state = State::kAtBarrier;
  th.site = site;
  yield_to_scheduler(l);
}

namespace {

// Parks the calling thread at warp op `op` until the scheduler has resolved its warp; returns the
// resolved op (a shuffle's value, a ballot's bits).
const WarpOp& wait_at_warp_op(Launch& l, Site site, const WarpOp& op) {
  Thread& th = l.threads[static_cast<size_t>(l.current)];
  th.state = State::kAtWarpOp;
  th.site = site;
  th.op = op;
  yield_to_scheduler(l);
  Launch& again = *g_launch;
  return again.threads[static_cast<size_t>(again.current)].op;
}

}  // namespace

void shuffle_bytes(unsigned mask, void* value, size_t bytes, ShuffleKind kind, int arg, int width,
                   Site site) {
  Launch& l = active("__shfl_*_sync");
  MT_CHECK(width >= 1 && width <= Limits::kWarpSize && (width & (width - 1)) == 0, block_name(l), ": shuffle at ",
           where(site), ": width ", width, " is not a power of two in [1, 32]");
  MT_CHECK(bytes <= 16, "shuffle of ", bytes, " bytes");
  WarpOp op;
  op.kind = kind;
  op.mask = mask;
  op.arg = arg;
  op.width = width;
  op.bytes = bytes;
  std::memcpy(op.value, value, bytes);
  std::memcpy(value, wait_at_warp_op(l, site, op).value, bytes);
}

unsigned ballot(unsigned mask, bool predicate, Site site) {
  WarpOp op;
  op.is_ballot = true;
  op.mask = mask;
  op.predicate = predicate;
  return wait_at_warp_op(active("__ballot_sync"), site, op).ballot_result;
}

void check_vector_access(const void* p, size_t bytes, Site site) {
  MT_CHECK(reinterpret_cast<uintptr_t>(p) % bytes == 0, "CUDA on the host: a ", bytes, "-byte vector access at ",
           where(site), " to address 0x", std::hex, reinterpret_cast<uintptr_t>(p), std::dec,
           " is not aligned to ", bytes, " bytes (a GPU faults on it)");
}

}  // namespace mixtrain::cuda_host
