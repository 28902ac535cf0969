// The only way the CPU kernels (src/kernels/cpu, src/kernels/onednn) reach a tensor's memory.
//
// They run on every device whose memory the host can address (the CPU, and host-memory devices such
// as the test suite's checked device, whose pointers are not plain host addresses): the backend
// translates the tensor's pointer. On the CPU that is the pointer itself, checked inline.
#pragma once

#include "core/backend.h"
#include "mixtrain/tensor.h"

namespace mixtrain::kernels {

inline void* host_data(const Tensor& t) {
  void* p = t.raw_data();
  if (t.device().is_cpu()) [[likely]] return p;
  return backend_for(t.device()).host_address(p, t.device());
}

// host_data as a typed pointer; throws when T is not the tensor's dtype.
template <typename T>
T* host_ptr(const Tensor& t) {
  T* p = t.data_ptr<T>();
  if (t.device().is_cpu()) [[likely]] return p;
  return static_cast<T*>(backend_for(t.device()).host_address(p, t.device()));
}

}  // namespace mixtrain::kernels
