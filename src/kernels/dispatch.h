// The kernel registry: one DispatchTable per kernel family, keyed by (device type, dtype).
//
// An op front-end looks its kernel up with `table(device, dtype)`; a missing entry throws an
// mt::Error naming the op, dtype and device. The CPU backend fills its entries where the kernels
// are defined (the table object lives in that translation unit, so the linker keeps it); a CUDA
// backend adds its entries from its own registration function without touching the front-ends.
// Dtype variants of a kernel are instantiations of one template, registered in one loop.
#pragma once

#include <array>
#include <cstdint>

#include "mixtrain/device.h"
#include "mixtrain/dtype.h"
#include "mixtrain/error.h"

namespace mixtrain::kernels {

template <typename Fn>
class DispatchTable {
 public:
  explicit DispatchTable(const char* op) : op_(op) {}

  void set(DeviceType device, DType dtype, Fn* fn) { fns_[static_cast<int>(device)][static_cast<int>(dtype)] = fn; }

  Fn* operator()(Device device, DType dtype) const {
    Fn* fn = fns_[static_cast<int>(device.type)][static_cast<int>(dtype)];
    MT_CHECK(fn != nullptr, op_, ": no kernel for dtype ", dtype, " on device ", device);
    return fn;
  }
  bool has(DeviceType device, DType dtype) const {
    return fns_[static_cast<int>(device)][static_cast<int>(dtype)] != nullptr;
  }
  const char* op() const { return op_; }

 private:
  const char* op_;
  std::array<std::array<Fn*, kNumDTypes>, kNumDeviceTypes> fns_{};
};

// Registers Kernel<T> for T in {float, double, float16, bfloat16}:
//   register_floating<MyKernel>(table, kCPU)   where MyKernel<T>::run has the table's signature.
template <template <typename> class Kernel, typename Fn>
void register_floating(DispatchTable<Fn>& table, DeviceType device) {
  table.set(device, kFloat32, &Kernel<float>::run);
  table.set(device, kFloat64, &Kernel<double>::run);
  table.set(device, kFloat16, &Kernel<float16>::run);
  table.set(device, kBFloat16, &Kernel<bfloat16>::run);
}

// Registers Kernel<T> for every dtype: the floating ones through register_floating, then
// int32, int64, uint8 and bool.
template <template <typename> class Kernel, typename Fn>
void register_all_dtypes(DispatchTable<Fn>& table, DeviceType device) {
  register_floating<Kernel>(table, device);
  table.set(device, kInt32, &Kernel<int32_t>::run);
  table.set(device, kInt64, &Kernel<int64_t>::run);
  table.set(device, kUInt8, &Kernel<uint8_t>::run);
  table.set(device, kBool, &Kernel<bool>::run);
}

}  // namespace mixtrain::kernels
