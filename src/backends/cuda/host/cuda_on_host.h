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
