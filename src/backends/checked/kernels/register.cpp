// The checked device's kernels: for every table and dtype the CPU has, a guard that refuses any
// tensor argument not on the checked device, counts a kernel that returns a value to the host as
// one host wait (on a GPU it is a copy back: SyncCounts::kernel_results), then runs the CPU kernel,
// which reaches the memory through Backend::host_address (backends/cpu/kernels/host_ptr.h).
//
// The guard is what makes the device catch a tensor created on the wrong device: an op front-end
// that checks its inputs' devices reports a mix itself, and every other path (a multi-tensor
// optimizer step, a scratch tensor made without a device inside a front-end) reaches a kernel here.
#include "backends/checked/kernels/register.h"

#include <type_traits>
#include <utility>
#include <vector>

#include "backends/checked/checked_backend.h"
#include "kernels/table_list.h"
#include "mixtrain/error.h"

namespace mixtrain::kernels {
namespace {

void require_checked(const char* op, const Tensor& t) {
  if (!t.defined() || t.device().type == kChecked) return;
  MT_FAIL("checked device: ", op, " was given ", describe(t), " on ", t.device(),
          " among tensors on the checked device; every tensor of an op must be on one device (a tensor created ",
          "without a device lands on the default device: pass .device, or move it with .to(device))");
}
void require_checked(const char* op, const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts) require_checked(op, t);
}
void require_checked(const char* op, const std::vector<SgdTensors>& ts) {
  for (const SgdTensors& t : ts)
    for (const Tensor* x : t.tensors()) require_checked(op, *x);
}
void require_checked(const char* op, const std::vector<AdamTensors>& ts) {
  for (const AdamTensors& t : ts)
    for (const Tensor* x : t.tensors()) require_checked(op, *x);
}
template <typename T>
void require_checked(const char*, const T&) {}  // scalars and parameter structs

template <typename A>
constexpr bool holds_tensors =
    std::is_same_v<std::remove_cvref_t<A>, Tensor> || std::is_same_v<std::remove_cvref_t<A>, std::vector<Tensor>> ||
    std::is_same_v<std::remove_cvref_t<A>, std::vector<SgdTensors>> ||
    std::is_same_v<std::remove_cvref_t<A>, std::vector<AdamTensors>>;

template <auto& Holder, size_t I, DType D, typename Fn = typename table_t<Holder>::function_type>
struct Guarded;

// How deep the calling thread is in guarded kernels: a CPU kernel may run others through the tables
// (unscale runs the multi-tensor check), which a device's own kernel would do inside one launch.
thread_local int guarded_depth = 0;

struct DepthScope {
  DepthScope() { ++guarded_depth; }
  ~DepthScope() { --guarded_depth; }
  DepthScope(const DepthScope&) = delete;
  DepthScope& operator=(const DepthScope&) = delete;
};

template <auto& Holder, size_t I, DType D, typename R, typename... A>
struct Guarded<Holder, I, D, R(A...)> {
  static R run(A... args) {
    const auto& table = table_at<Holder, I>();
    (require_checked(table.op(), args), ...);
    // A result the host receives (a count, an index, a norm): one copy back on a real device.
    if constexpr (!std::is_void_v<R> && (holds_tensors<A> || ...))
      if (guarded_depth == 0) checked::backend().count_kernel_result();
    const DepthScope scope;
    return table(Device{}, D)(args...);
  }
};

}  // namespace

void register_checked(Registry& registry) {
  MT_INTERNAL_ASSERT(registry.device() == kChecked, "register_checked: registry of ", registry.device());
  visit_tables([&]<auto& Holder, size_t I>() {
    auto& table = table_at<Holder, I>();
    [&]<size_t... D>(std::index_sequence<D...>) {
      ((table.has(kCPU, static_cast<DType>(D))
            ? registry.set(table, static_cast<DType>(D), &Guarded<Holder, I, static_cast<DType>(D)>::run)
            : void()),
       ...);
    }(std::make_index_sequence<kNumDTypes>{});
  });
}

}  // namespace mixtrain::kernels
