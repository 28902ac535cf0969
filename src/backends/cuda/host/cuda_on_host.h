// CUDA's kernel-side spelling for the host compiler: what a .cu file of src/backends/cuda/kernels
// compiled by g++ or clang sees in place of nvcc's built-ins (block_runner.h runs it). Included only
// by host-CUDA translation units: it defines threadIdx, __shared__ and the rest as macros.
//
//   __global__ void scale(float* x, int n) {
//     __shared__ float tile[256];
//     const int i = blockIdx.x * blockDim.x + threadIdx.x;
//     ...; __syncthreads(); ...
//   }
//   mixtrain::cuda_host::launch_kernel(scale, grid, block, /*dynamic shared*/ 0, "scale", ptr, n);
//
// __shared__ variables are function-level statics: blocks run one at a time, so each block sees one
// copy, as on a GPU (and, as on a GPU, starts from what the previous block left). Dynamic shared
// memory is MT_DYNAMIC_SHARED(type, name), which nvcc spells `extern __shared__ type name[]`.
#pragma once

#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "backends/cuda/host/block_runner.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static

#define threadIdx (::mixtrain::cuda_host::thread_idx())
#define blockIdx (::mixtrain::cuda_host::block_idx())
#define blockDim (::mixtrain::cuda_host::block_dim())
#define gridDim (::mixtrain::cuda_host::grid_dim())
#define warpSize 32
using dim3 = ::mixtrain::cuda_host::Dim3;
#define MT_LAUNCH(...) | ::mixtrain::cuda_host::LaunchShape(__VA_ARGS__)
#define MT_VECTOR_ACCESS(ptr) (::mixtrain::cuda_host::checked_vector(ptr))
#define MT_DYNAMIC_SHARED(type, name) type* name = static_cast<type*>(::mixtrain::cuda_host::dynamic_shared())

inline void __syncthreads(::mixtrain::cuda_host::Site site = ::mixtrain::cuda_host::Site::here()) {
  ::mixtrain::cuda_host::syncthreads(site);
}

template <typename T>
T __shfl_sync(unsigned mask, T value, int src_lane, int width = 32,
              ::mixtrain::cuda_host::Site site = ::mixtrain::cuda_host::Site::here()) {
  return ::mixtrain::cuda_host::shuffle(mask, value, ::mixtrain::cuda_host::ShuffleKind::kIndex, src_lane, width, site);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32,
                 ::mixtrain::cuda_host::Site site = ::mixtrain::cuda_host::Site::here()) {
  return ::mixtrain::cuda_host::shuffle(mask, value, ::mixtrain::cuda_host::ShuffleKind::kUp, static_cast<int>(delta),
                                        width, site);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32,
                   ::mixtrain::cuda_host::Site site = ::mixtrain::cuda_host::Site::here()) {
  return ::mixtrain::cuda_host::shuffle(mask, value, ::mixtrain::cuda_host::ShuffleKind::kDown, static_cast<int>(delta),
                                        width, site);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32,
                  ::mixtrain::cuda_host::Site site = ::mixtrain::cuda_host::Site::here()) {
  return ::mixtrain::cuda_host::shuffle(mask, value, ::mixtrain::cuda_host::ShuffleKind::kXor, lane_mask, width, site);
}
inline unsigned __ballot_sync(unsigned mask, int predicate, ::mixtrain::cuda_host::Site site = ::mixtrain::cuda_host::Site::here()) {
  return ::mixtrain::cuda_host::ballot(mask, predicate != 0, site);
}
inline int __any_sync(unsigned mask, int predicate, ::mixtrain::cuda_host::Site site = ::mixtrain::cuda_host::Site::here()) {
  return ::mixtrain::cuda_host::ballot(mask, predicate != 0, site) != 0;
}
inline int __all_sync(unsigned mask, int predicate, ::mixtrain::cuda_host::Site site = ::mixtrain::cuda_host::Site::here()) {
  return ::mixtrain::cuda_host::ballot(mask, predicate != 0, site) == mask;
}

namespace mixtrain::cuda_host {

// MT_VECTOR_ACCESS(p): p, after checking that it is aligned to its vector's size.
template <typename T>
T* checked_vector(T* p, Site site = Site::here()) {
  check_vector_access(p, sizeof(T), site);
  return p;
}

// `kernel MT_LAUNCH(grid, block, shared, stream)(args...)` (backends/cuda/kernels/common.cuh) expands
// here to `kernel | LaunchShape(grid, block, shared, stream)(args...)`: the call binds first and
// holds the arguments, `|` launches them with the kernel. Streams run in order on the host, so the
// stream only has to be one (it is not otherwise used).
template <typename... Args>
struct PendingLaunch {
  Dim3 grid, block;
  size_t shared = 0;
  Site site;
  std::tuple<Args...> args;
};

struct LaunchShape {
  Dim3 grid, block;
  size_t shared;
  Site site;
  template <typename Stream = std::nullptr_t>
  LaunchShape(Dim3 grid_, Dim3 block_, size_t shared_ = 0, Stream = nullptr, Site site_ = Site::here())
      : grid(grid_), block(block_), shared(shared_), site(site_) {}
  template <typename... Args>
  PendingLaunch<std::decay_t<Args>...> operator()(Args&&... args) const {
    return {grid, block, shared, site, std::tuple<std::decay_t<Args>...>(std::forward<Args>(args)...)};
  }
};

template <typename... Params, typename... Args>
void operator|(void (*kernel)(Params...), const PendingLaunch<Args...>& launch) {
  static_assert(sizeof...(Params) == sizeof...(Args), "a launch's arguments must match the kernel's parameters");
  const std::tuple<std::decay_t<Params>...> packed = std::apply(
      [](const auto&... a) { return std::tuple<std::decay_t<Params>...>(a...); }, launch.args);
  LaunchConfig config;
  config.grid = launch.grid;
  config.block = launch.block;
  config.dynamic_shared_bytes = launch.shared;
  config.kernel = reinterpret_cast<const void*>(kernel);
  config.name = std::string("launched at ") + launch.site.file + ":" + std::to_string(launch.site.line);
  ::mixtrain::cuda_host::launch(config, [&packed, kernel] {
    auto mine = packed;
    std::apply(kernel, mine);
  });
}

// kernel<<<grid, block, shared>>>(args...): every thread gets its own copy of the arguments, as
// kernel parameters are on a GPU.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), Dim3 grid, Dim3 block, size_t dynamic_shared_bytes, const char* name,
                   Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "launch_kernel: the kernel's parameters and the arguments differ");
  const std::tuple<std::decay_t<Params>...> packed(std::forward<Args>(args)...);
  LaunchConfig config;
  config.grid = grid;
  config.block = block;
  config.dynamic_shared_bytes = dynamic_shared_bytes;
  config.kernel = reinterpret_cast<const void*>(kernel);
  config.name = name;
  launch(config, [&packed, kernel] {
    auto mine = packed;
    std::apply(kernel, mine);
  });
}

}  // namespace mixtrain::cuda_host
