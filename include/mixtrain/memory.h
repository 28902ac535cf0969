// mixtrain/memory.h: byte accounting for tensor storage.
//
// Every tensor's storage comes from one allocator per device, which counts the bytes the tensors
// asked for: a bf16 tensor of N elements counts 2N bytes, however the allocator rounds or caches.
// Blocks are 64-byte aligned (a cache line, and the widest AVX-512 load).
//
// Every counted byte also has a category (what it is for: parameters, gradients, saved activations,
// ...), and the allocator keeps, for each device, the breakdown by category at the peak together
// with the op and module that were running: peak_breakdown(). The categories come from scopes that
// the training loop and the autograd engine open (CategoryScope, OpScope) and from set_category(),
// which re-labels a tensor after the fact (docs/notes/memory-breakdown.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "mixtrain/device.h"

namespace mixtrain {
class Tensor;
}

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

// ---- What the bytes are for.
enum class Category : uint8_t {
  kParameters,           // the model's parameters: the weights the forward reads
  kMasterWeights,        // the optimizer's fp32 copies of 16-bit parameters (or a packed master's low halves)
  kGradients,            // the parameters' .grad
  kOptimizerState,       // moments, momentum buffers, Kahan compensations
  kActivations,          // made by the forward and still held: what backward reads, and the loss
  kActivationGradients,  // backward's gradients in flight: with respect to activations, not yet consumed
  kOther,                // made outside these phases: the batch, buffers, datasets, the loss scale, ...
};
inline constexpr int kNumCategories = 7;
// "parameters", "master_weights", "gradients", "optimizer_state", "activations", "activation_gradients", "other".
std::string_view to_string(Category c);

// RAII: what this thread allocates in its scope is counted under `category` (the scopes nest; the
// innermost wins). Outside any scope: kOther. The autograd engine opens kActivationGradients for a
// backward pass (kActivations again for a forward recomputed inside it); the Trainer opens
// kActivations around forward and loss and kOptimizerState around the optimizer step.
class CategoryScope {
 public:
  explicit CategoryScope(Category category);
  ~CategoryScope();
  CategoryScope(const CategoryScope&) = delete;
  CategoryScope& operator=(const CategoryScope&) = delete;

 private:
  Category previous_;
};
Category current_category();

// RAII: names the op that runs on this thread while it lives. Only the outermost scope of a thread
// counts (ops that an op calls belong to it). What the op allocates and still holds is its
// temporaries until the scope ends (Breakdown::op_temporary_bytes); what survives it stays in the
// category it was allocated under. `op` and `*module` must outlive the scope (op names are static
// strings; the module path is the module's own string); module may be null. Cheap: a few
// thread-local stores, no lock.
class OpScope {
 public:
  OpScope() = default;  // names nothing
  OpScope(std::string_view op, const std::string* module);
  ~OpScope();
  OpScope(OpScope&& other) noexcept : counted_(other.counted_), outermost_(other.outermost_) {
    other.counted_ = other.outermost_ = false;
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;
  OpScope& operator=(OpScope&&) = delete;

 private:
  bool counted_ = false;    // this scope raised the thread's depth
  bool outermost_ = false;  // and it is the op the bytes are attributed to
};

// Moves the bytes of `t`'s storage (all of it, whichever view `t` is) to `category`. Undefined
// tensors are ignored. The storage stops counting as the running op's temporaries.
void set_category(const Tensor& t, Category category);

// The tensor bytes of a device by category, at one moment.
struct Breakdown {
  int64_t total_bytes = 0;  // every live tensor byte: the sum of `bytes` and op_temporary_bytes
  // By category, without the running ops' temporaries.
  std::array<int64_t, kNumCategories> bytes{};
  // Held by the ops that were running (OpScope) and not yet handed back: an op's scratch, and the
  // outputs it has not returned yet.
  int64_t op_temporary_bytes = 0;
  // Memory the device's allocator held for reuse, in no tensor (Stats::cached_bytes; not in total_bytes).
  int64_t cached_bytes = 0;
  std::string op;      // the op running on the thread that reached the peak ("" outside any op)
  std::string module;  // that op's module path ("" when unknown: see autograd::ModuleScopes)
  Category phase = Category::kOther;  // that thread's category then: forward, backward, optimizer step, ...

  int64_t operator[](Category c) const { return bytes[static_cast<size_t>(c)]; }
};
// How a thread's category reads as the phase of a training step: "forward" (kActivations),
// "backward" (kActivationGradients), "optimizer step" (kOptimizerState), "outside a step" (kOther);
// to_string() for the others.
std::string_view phase_name(Category c);

// The breakdown at the device's peak since the start or the last reset_peak() (its total_bytes is
// Stats::peak_bytes), and now.
Breakdown peak_breakdown(Device device = Device{});
Breakdown current_breakdown(Device device = Device{});

// ---- Raw allocation through the accounted allocator (what Storage uses). `nbytes` may be 0.
// allocate() writes into `tag` what the bytes were counted as; deallocate() needs it back.
struct Tag {
  Category category = Category::kOther;
  uint64_t op = 0;  // the serial number of the outermost op scope that allocated it (0: none)
};
void* allocate(size_t nbytes, Device device, Tag& tag);
void deallocate(void* ptr, size_t nbytes, Device device, const Tag& tag);
// Re-labels `nbytes` allocated with `tag` on `device` (set_category() for a raw block).
void set_category(Tag& tag, size_t nbytes, Device device, Category category);

}  // namespace mixtrain::memory
