// The memory breakdown (mixtrain/memory.h): what the live tensor bytes of each device are for, now
// and at the peak. Why categories come from scopes and not from the tensors' later use, and what
// each one holds in a training step: docs/notes/memory-breakdown.md.
#include "core/memory_ledger.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "mixtrain/error.h"
#include "mixtrain/tensor.h"

namespace mixtrain::memory {
namespace {

// The op attributed on this thread (the outermost OpScope) and the thread's category.
struct ThreadState {
  Category category = Category::kOther;
  int op_depth = 0;
  uint64_t op = 0;  // serial of the outermost op scope, 0 outside any
  std::string_view op_name;
  const std::string* module = nullptr;
  // Ledgers that counted bytes of the running op: told when it ends.
  std::vector<struct Ledger*> op_ledgers;
};
thread_local ThreadState this_thread;
std::atomic<uint64_t> next_op_serial{0};

// A running op's bytes of one category on one device (an op may allocate under two: a backward node
// that recomputes a checkpointed forward).
struct RunningOp {
  uint64_t op;
  Category category;
  int64_t bytes;
};

struct Ledger {
  std::mutex mu;
  std::array<int64_t, kNumCategories> bytes{};
  int64_t total = 0;
  int64_t peak = 0;
  std::vector<RunningOp> running;  // a few entries: one per thread inside an op
  Breakdown at_peak;

  RunningOp* find(const Tag& tag) {
    for (RunningOp& r : running)
      if (r.op == tag.op && r.category == tag.category) return &r;
    return nullptr;
  }

  // mu held. The running ops' bytes count as their temporaries, not in their categories.
  Breakdown snapshot(Backend& backend, Device device) const {
    Breakdown b;
    b.total_bytes = total;
    b.bytes = bytes;
    for (const RunningOp& r : running) {
      b.bytes[static_cast<size_t>(r.category)] -= r.bytes;
      b.op_temporary_bytes += r.bytes;
    }
    b.cached_bytes = backend.stats(device).cached_bytes;
    const ThreadState& t = this_thread;
    b.phase = t.category;
    if (t.op != 0) {
      b.op = std::string(t.op_name);
      if (t.module != nullptr) b.module = *t.module;
    }
    return b;
  }
};

// Device indices beyond this are refused (no machine has so many devices of one type).
constexpr int kMaxDeviceIndex = 256;
constinit std::array<std::atomic<Ledger*>, kNumDeviceTypes * kMaxDeviceIndex> ledgers{};

Ledger& ledger_of(Device device) {
  MT_CHECK(device.index >= 0 && device.index < kMaxDeviceIndex, "memory: device index ", device.index,
           " is out of range");
  std::atomic<Ledger*>& slot = ledgers[static_cast<size_t>(device.type) * kMaxDeviceIndex + device.index];
  Ledger* l = slot.load(std::memory_order_acquire);
  if (l == nullptr) [[unlikely]] {
    // Never freed: blocks may be returned while the process ends, after any static destructor.
    auto* made = new Ledger;
    if (slot.compare_exchange_strong(l, made, std::memory_order_acq_rel)) {
      l = made;
    } else {
      delete made;
    }
  }
  return *l;
}

void move_bytes(Ledger& l, Tag& tag, size_t nbytes, Category to) {
  const auto n = static_cast<int64_t>(nbytes);
  std::lock_guard lock(l.mu);
  l.bytes[static_cast<size_t>(tag.category)] -= n;
  l.bytes[static_cast<size_t>(to)] += n;
  if (tag.op != 0)
    if (RunningOp* r = l.find(tag)) r->bytes -= n;
  tag.category = to;
  tag.op = 0;
}

}  // namespace

std::string_view to_string(Category c) {
  switch (c) {
    case Category::kParameters: return "parameters";
    case Category::kMasterWeights: return "master_weights";
    case Category::kGradients: return "gradients";
    case Category::kOptimizerState: return "optimizer_state";
    case Category::kActivations: return "activations";
    case Category::kActivationGradients: return "activation_gradients";
    case Category::kOther: return "other";
  }
  return "unknown";
}

std::string_view phase_name(Category c) {
  switch (c) {
    case Category::kActivations: return "forward";
    case Category::kActivationGradients: return "backward";
    case Category::kOptimizerState: return "optimizer step";
    case Category::kOther: return "outside a step";
    default: return to_string(c);
  }
}

CategoryScope::CategoryScope(Category category) : previous_(this_thread.category) { this_thread.category = category; }
CategoryScope::~CategoryScope() { this_thread.category = previous_; }
Category current_category() { return this_thread.category; }

OpScope::OpScope(std::string_view op, const std::string* module) : counted_(true) {
  ThreadState& t = this_thread;
  if (t.op_depth++ > 0) return;
  outermost_ = true;
  t.op = next_op_serial.fetch_add(1, std::memory_order_relaxed) + 1;
  t.op_name = op;
  t.module = module;
}

OpScope::~OpScope() {
  if (!counted_) return;
  ThreadState& t = this_thread;
  --t.op_depth;
  if (!outermost_) return;
  // What the op still holds is no longer its temporaries: it stays in its category.
  for (Ledger* l : t.op_ledgers) {
    std::lock_guard lock(l->mu);
    std::erase_if(l->running, [&](const RunningOp& r) { return r.op == t.op; });
  }
  t.op_ledgers.clear();
  t.op = 0;
  t.op_name = {};
  t.module = nullptr;
}

void set_category(Tag& tag, size_t nbytes, Device device, Category category) {
  if (tag.category == category && tag.op == 0) return;
  move_bytes(ledger_of(device), tag, nbytes, category);
}

Breakdown peak_breakdown(Device device) {
  Ledger& l = ledger_of(device);
  std::lock_guard lock(l.mu);
  return l.at_peak;
}

Breakdown current_breakdown(Device device) {
  Backend& backend = backend_for(device);
  Ledger& l = ledger_of(device);
  std::lock_guard lock(l.mu);
  return l.snapshot(backend, device);
}

namespace detail {

void count_allocation(size_t nbytes, Device device, Tag& tag, Backend& backend) {
  ThreadState& t = this_thread;
  tag.category = t.category;
  tag.op = t.op;
  const auto n = static_cast<int64_t>(nbytes);
  Ledger& l = ledger_of(device);
  std::lock_guard lock(l.mu);
  l.bytes[static_cast<size_t>(tag.category)] += n;
  l.total += n;
  if (tag.op != 0) {
    if (RunningOp* r = l.find(tag)) {
      r->bytes += n;
    } else {
      l.running.push_back({tag.op, tag.category, n});
      if (std::find(t.op_ledgers.begin(), t.op_ledgers.end(), &l) == t.op_ledgers.end()) t.op_ledgers.push_back(&l);
    }
  }
  if (l.total > l.peak) {
    l.peak = l.total;
    l.at_peak = l.snapshot(backend, device);
  }
}

void count_free(size_t nbytes, Device device, const Tag& tag) {
  const auto n = static_cast<int64_t>(nbytes);
  Ledger& l = ledger_of(device);
  std::lock_guard lock(l.mu);
  l.bytes[static_cast<size_t>(tag.category)] -= n;
  l.total -= n;
  if (tag.op != 0)
    if (RunningOp* r = l.find(tag)) r->bytes -= n;
}

void reset_ledger_peak(Device device, Backend& backend) {
  Ledger& l = ledger_of(device);
  std::lock_guard lock(l.mu);
  l.peak = l.total;
  l.at_peak = l.snapshot(backend, device);
}

}  // namespace detail
}  // namespace mixtrain::memory
