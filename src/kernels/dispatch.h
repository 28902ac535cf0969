// The kernel registry: one DispatchTable per kernel entry point, keyed by (device type, dtype).
//
// An op front-end looks its kernel up with `table(device, dtype)`; a missing entry throws an
// mt::Error naming the op, dtype and device. Tables are namespace-scope objects constant-initialised
// to "no kernel" (constinit: they exist before any static initialiser runs), and filled only by the
// backends' explicit registration functions, `register_<backend>(Registry&)`: the CPU's
// (src/backends/cpu/kernels/register.cpp) runs once, on the first lookup that misses; another backend calls
// register_kernels() with its own function before its first op. A Registry writes only the slots of
// its own device type, so the order in which backends register cannot matter.
//
// A table is declared and defined at once, in its family's header, by one line:
//
//   MT_KERNEL_TABLE(DispatchTable<CopyFn>, copy_table, "copy");   // type, name, constructor arguments
//
// (an inline constinit variable: no separate definition). That line is the table's only listing:
// CMake collects the MT_KERNEL_TABLE lines of src/kernels/*.h into the typed list that
// for_each_table and the wrapping backends walk (kernels/table_list.h, cmake/KernelTables.cmake).
// The macro must start its line. docs/notes/backends.md says how to add a device.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "mixtrain/device.h"
#include "mixtrain/dtype.h"
#include "mixtrain/error.h"

// See above: `Type` without commas outside parentheses (an alias for std::array tables).
#define MT_KERNEL_TABLE(Type, name, ...) inline constinit Type name{__VA_ARGS__}

namespace mixtrain::kernels {

// Runs the built-in backends' registrations once (thread-safe); called on a lookup miss.
void register_builtin_kernels();

// The untyped part of every table: what for_each_table can visit without knowing the signature.
class DispatchTableBase {
 public:
  using AnyFn = void (*)();
  explicit constexpr DispatchTableBase(const char* op) : op_(op) {}
  DispatchTableBase(const DispatchTableBase&) = delete;
  DispatchTableBase& operator=(const DispatchTableBase&) = delete;

  const char* op() const { return op_; }
  bool has(DeviceType device, DType dtype) const { return slot(device, dtype).load(std::memory_order_acquire) != nullptr; }
  // Gives `to` the kernels that `from` has (a device whose kernels are another's, such as a
  // host-memory test device running the CPU kernels).
  void alias_device(DeviceType from, DeviceType to) {
    for (int d = 0; d < kNumDTypes; ++d)
      fns_[static_cast<int>(to)][d].store(fns_[static_cast<int>(from)][d].load(std::memory_order_acquire),
                                          std::memory_order_release);
  }

 protected:
  std::atomic<AnyFn>& slot(DeviceType device, DType dtype) { return fns_[static_cast<int>(device)][static_cast<int>(dtype)]; }
  const std::atomic<AnyFn>& slot(DeviceType device, DType dtype) const {
    return fns_[static_cast<int>(device)][static_cast<int>(dtype)];
  }
  [[noreturn]] void missing(Device device, DType dtype) const;
  AnyFn lookup_after_registration(Device device, DType dtype) const;

 private:
  const char* op_;
  std::array<std::array<std::atomic<AnyFn>, kNumDTypes>, kNumDeviceTypes> fns_{};
};

template <typename Fn>
class DispatchTable : public DispatchTableBase {
 public:
  using function_type = Fn;
  explicit constexpr DispatchTable(const char* op) : DispatchTableBase(op) {}

  void set(DeviceType device, DType dtype, Fn* fn) {
    slot(device, dtype).store(reinterpret_cast<AnyFn>(fn), std::memory_order_release);
  }
  Fn* operator()(Device device, DType dtype) const {
    AnyFn fn = slot(device.type, dtype).load(std::memory_order_acquire);
    if (fn == nullptr) [[unlikely]] fn = lookup_after_registration(device, dtype);
    return reinterpret_cast<Fn*>(fn);
  }
};

// What a backend's registration function receives: write access to its own device type's slots.
class Registry {
 public:
  explicit Registry(DeviceType device) : device_(device) {}
  DeviceType device() const { return device_; }

  template <typename Fn>
  void set(DispatchTable<Fn>& table, DType dtype, Fn* fn) const { table.set(device_, dtype, fn); }
  // Kernel<T>::run for T in {float, double, float16, bfloat16}.
  template <template <typename> class Kernel, typename Fn>
  void floating(DispatchTable<Fn>& table) const {
    set(table, kFloat32, &Kernel<float>::run);
    set(table, kFloat64, &Kernel<double>::run);
    set(table, kFloat16, &Kernel<float16>::run);
    set(table, kBFloat16, &Kernel<bfloat16>::run);
  }
  // The floating ones, then int32, int64, uint8 and bool.
  template <template <typename> class Kernel, typename Fn>
  void all_dtypes(DispatchTable<Fn>& table) const {
    floating<Kernel>(table);
    set(table, kInt32, &Kernel<int32_t>::run);
    set(table, kInt64, &Kernel<int64_t>::run);
    set(table, kUInt8, &Kernel<uint8_t>::run);
    set(table, kBool, &Kernel<bool>::run);
  }
  // This device runs `from`'s kernels for every dtype `from` has (a host-memory device whose kernels
  // are the CPU's); call it after `from` has registered.
  void alias(DispatchTableBase& table, DeviceType from) const { table.alias_device(from, device_); }
  // One function for every dtype (kernels that dispatch on dtypes inside, such as copy).
  template <typename Fn>
  void every_dtype(DispatchTable<Fn>& table, Fn* fn) const {
    for (int d = 0; d < kNumDTypes; ++d) set(table, static_cast<DType>(d), fn);
  }

 private:
  DeviceType device_;
};

// Runs `register_fn` for `device` (a backend's register_<backend>), after the built-in ones.
void register_kernels(DeviceType device, void (*register_fn)(Registry&));

// Visits every table of the registry.
void for_each_table(void (*visit)(DispatchTableBase& table, void* context), void* context);

}  // namespace mixtrain::kernels
