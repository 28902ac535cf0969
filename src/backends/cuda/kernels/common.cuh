// What every CUDA kernel file shares: the device type behind each mixtrain dtype, loads and stores
// through the compute ("opmath") type, strided element addressing, and the launch helpers.
//
// Precision follows the CPU kernels: 16-bit values are widened exactly to fp32, math is fp32 (fp64
// for fp64), and a 16-bit result is rounded once, to nearest even (__float2half_rn,
// __float2bfloat16_rn: the CPU's rounding, bit for bit).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// Every launch is spelled `kernel MT_LAUNCH(grid, block, shared bytes, stream)(args...)`: CUDA's
// <<<...>>> under nvcc, the CUDA-on-host engine (backends/cuda/host/cuda_on_host.h) when the same
// source is compiled by the host compiler.
#ifndef MT_LAUNCH
#define MT_LAUNCH(...) <<<__VA_ARGS__>>>
#endif
// A pointer used for an 8- or 16-byte vector access: a GPU faults on a misaligned one; the host
// checks it (x86 would not fault).
#ifndef MT_VECTOR_ACCESS
#define MT_VECTOR_ACCESS(ptr) (ptr)
#endif
// A kernel's dynamic shared memory (extern __shared__), 128-byte aligned.
#ifndef MT_DYNAMIC_SHARED
#define MT_DYNAMIC_SHARED(type, name) extern __shared__ __align__(128) type name[]
#endif

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cuda/cuda_backend.h"
#include "kernels/dispatch.h"
#include "kernels/dtype_dispatch.h"
#include "kernels/float_to_int.h"
#include "mixtrain/memory.h"
#include "mixtrain/tensor.h"

namespace mixtrain::kernels::cuda {

using mixtrain::cuda::check;
using mixtrain::cuda::DeviceGuard;

// ---- types
template <typename T>
struct DeviceTypeOf {
  using type = T;  // float, double, integers, bool
};
template <>
struct DeviceTypeOf<float16> {
  using type = __half;
};
template <>
struct DeviceTypeOf<bfloat16> {
  using type = __nv_bfloat16;
};
template <typename T>
using dev_t = typename DeviceTypeOf<T>::type;

template <typename D>
inline constexpr bool is_half_v = std::is_same_v<D, __half> || std::is_same_v<D, __nv_bfloat16>;
template <typename D>
inline constexpr bool is_floating_dev_v = is_half_v<D> || std::is_floating_point_v<D>;

// The compute type of a device storage type: fp32 for 16-bit and fp32, fp64 for fp64, the type
// itself for integers.
template <typename D>
using opmath_t = std::conditional_t<is_half_v<D>, float, D>;

template <typename D>
__device__ __forceinline__ opmath_t<D> load(const D* p) {
  if constexpr (std::is_same_v<D, __half>) return __half2float(*p);
  else if constexpr (std::is_same_v<D, __nv_bfloat16>) return __bfloat162float(*p);
  else return *p;
}

// Rounds a compute value once into the storage type (any value type to any storage type).
template <typename D, typename C>
__device__ __forceinline__ D round_to(C v) {
  // Through fp32, as the CPU's convert (backends/cpu/kernels/loops.h): the same bits on both devices.
  if constexpr (std::is_same_v<D, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != C(0);
  } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<C>) {
    return saturating_float_to_int<D>(v);  // not the hardware's rule alone: the CPU's (float_to_int.h)
  } else {
    return static_cast<D>(v);
  }
}

// Value conversion between storage types (copy, to()).
template <typename To, typename From>
__device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) return v;
  else return round_to<To>(load(&v));
}

// A double scalar converted on the host as the CPU kernels convert it (through fp32 for 16-bit
// types), as the device type's bits: fill and masked_fill write the same bits on both devices.
template <typename T>
dev_t<T> scalar_as(double value) {
  T host;
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) host = T(static_cast<float>(value));
  else if constexpr (std::is_same_v<T, bool>) host = value != 0.0;
  else if constexpr (std::is_integral_v<T>) host = saturating_float_to_int<T>(value);
  else host = static_cast<T>(value);
  dev_t<T> v;
  static_assert(sizeof(v) == sizeof(host));
  std::memcpy(static_cast<void*>(&v), &host, sizeof(host));
  return v;
}

// -inf in a compute type (the identity of a max).
template <typename C>
__device__ __forceinline__ C minus_infinity() {
  if constexpr (std::is_same_v<C, double>) return -static_cast<double>(INFINITY);
  else return -INFINITY;
}

// ---- device scratch memory: a few bytes for results, or per-block partial sums, from the caching
// allocator (no cudaMalloc per call). Freed at scope exit; the allocator is stream-ordered, so the
// block may be reused by later work on the same stream without a synchronisation.
class DeviceScratch {
 public:
  DeviceScratch(Device device, size_t nbytes)
      : device_(device), nbytes_(nbytes), ptr_(memory::allocate(nbytes, device, tag_)) {}
  ~DeviceScratch() { memory::deallocate(ptr_, nbytes_, device_, tag_); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  Device device_;
  size_t nbytes_;
  memory::Tag tag_;  // before ptr_: allocate() fills it
  void* ptr_;
};

// Host -> device copy of `count` values on the device's stream.
template <typename T>
void upload(Device device, T* dst, const T* src, size_t count) {
  DeviceGuard guard(device);
  check(cudaMemcpyAsync(dst, src, count * sizeof(T), cudaMemcpyHostToDevice, mixtrain::cuda::stream(device)), "upload");
  // The source is pageable host memory: cudaMemcpyAsync has copied it out before returning.
}

// Device -> host copy of `count` values after the work queued so far on the device's stream: a sync,
// counted as a kernel result (mixtrain/device.h, SyncCounts).
template <typename T>
void download(Device device, T* dst, const T* src, size_t count) {
  mixtrain::cuda::backend().count_kernel_result();
  DeviceGuard guard(device);
  const cudaStream_t s = mixtrain::cuda::stream(device);
  check(cudaMemcpyAsync(dst, src, count * sizeof(T), cudaMemcpyDeviceToHost, s), "read back");
  check(cudaStreamSynchronize(s), "read back");
}

// ---- strided addressing: a tensor's element pointer, sizes and strides (elements), by value.
struct StridedView {
  char* data = nullptr;
  int ndim = 0;
  bool contiguous = true;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};

inline StridedView view_of(const Tensor& t) {
  StridedView v;
  v.data = static_cast<char*>(t.raw_data());
  v.ndim = t.dim();
  v.contiguous = t.is_contiguous();
  for (int d = 0; d < v.ndim; ++d) {
    v.sizes[d] = t.shape()[d];
    v.strides[d] = t.strides()[d];
  }
  return v;
}

// The element offset of row-major linear index `i` of the view's shape.
__device__ __forceinline__ int64_t element_offset(const StridedView& v, int64_t i) {
  if (v.contiguous) return i;
  int64_t off = 0;
  for (int d = v.ndim - 1; d >= 0; --d) {
    const int64_t size = v.sizes[d];
    off += (i % size) * v.strides[d];
    i /= size;
  }
  return off;
}

template <typename D>
__device__ __forceinline__ D* at(const StridedView& v, int64_t i) {
  return reinterpret_cast<D*>(v.data) + element_offset(v, i);
}

// ---- launches
inline cudaStream_t stream_of(const Tensor& t) { return mixtrain::cuda::stream(t.device()); }

inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

constexpr int kThreads = 256;

inline unsigned grid_for(int64_t n, int threads = kThreads) {
  // A grid-stride loop covers the rest: more blocks than a few waves of the GPU buys nothing.
  return static_cast<unsigned>(std::clamp<int64_t>((n + threads - 1) / threads, 1, int64_t{1} << 16));
}

// Threads of a block that reduces one row of n elements (a multiple of 32, at most 1024).
inline int threads_for_row(int64_t n) {
  if (n <= 32) return 32;
  if (n <= 64) return 64;
  if (n <= 128) return 128;
  return n < 4096 ? 256 : 1024;
}

// Blocks of a launch with one block per row (kernels loop over rows with a stride of gridDim.x).
inline unsigned blocks_for_rows(int64_t rows) { return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, int64_t{1} << 16)); }

template <typename F>
__global__ void for_each_index_kernel(int64_t n, F f) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    f(i);
}

// Runs f(i) for i in [0, n) on `device`'s stream.
template <typename F>
void for_each_index(Device device, int64_t n, F f, const char* what) {
  if (n <= 0) return;
  DeviceGuard guard(device);
  for_each_index_kernel<F> MT_LAUNCH(grid_for(n), kThreads, 0, mixtrain::cuda::stream(device))(n, f);
  check_launch(what);
}

// ---- elementwise maps: out[i] = round(f(in_0[i], ..., in_{K-1}[i])), every operand of storage type D.
// Contiguous operands whose addresses are 16-byte aligned move 16 bytes per load and store (8 bf16
// or fp16, 4 fp32, 2 fp64 values; the tail past the last full vector element by element); any other
// layout (broadcast stride-0 views, transposes) goes element by element through its strides. Both
// paths apply the same f to the same values: the layout never changes a result.
template <typename D>
struct alignas(16) Pack16 {
  static constexpr int kCount = 16 / sizeof(D);
  D v[kCount];
};

template <typename D, int K>
struct Operands {
  const D* p[K];
};

template <typename D, int K, typename F>
__device__ __forceinline__ D apply_loaded(const F& f, const D (&x)[K]) {
  if constexpr (K == 1) return round_to<D>(f(load(&x[0])));
  else if constexpr (K == 2) return round_to<D>(f(load(&x[0]), load(&x[1])));
  else return round_to<D>(f(load(&x[0]), load(&x[1]), load(&x[2])));
}

template <typename D, int K, typename F>
__global__ void map_vectors_kernel(int64_t vectors, int64_t n, D* out, Operands<D, K> in, F f) {
  constexpr int N = Pack16<D>::kCount;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < vectors; i += stride) {
    Pack16<D> packs[K];
#pragma unroll
    for (int k = 0; k < K; ++k) packs[k] = *MT_VECTOR_ACCESS(reinterpret_cast<const Pack16<D>*>(in.p[k]) + i);
    Pack16<D> result;
#pragma unroll
    for (int e = 0; e < N; ++e) {
      D x[K];
#pragma unroll
      for (int k = 0; k < K; ++k) x[k] = packs[k].v[e];
      result.v[e] = apply_loaded<D, K>(f, x);
    }
    *MT_VECTOR_ACCESS(reinterpret_cast<Pack16<D>*>(out) + i) = result;
  }
  // The tail: at most N - 1 elements, one thread each.
  for (int64_t i = vectors * N + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    D x[K];
#pragma unroll
    for (int k = 0; k < K; ++k) x[k] = in.p[k][i];
    out[i] = apply_loaded<D, K>(f, x);
  }
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// f: a __device__ functor or extended lambda taking K opmath_t<D> values, returning the compute value.
template <typename D, int K, typename F>
void map_elements(const Tensor& out, const std::array<const Tensor*, K>& in, F f, const char* what) {
  const int64_t n = out.numel();
  if (n <= 0) return;
  bool vectorised = out.is_contiguous() && aligned16(out.raw_data());
  for (const Tensor* t : in) vectorised = vectorised && t->is_contiguous() && aligned16(t->raw_data());
  if (vectorised) {
    Operands<D, K> ops;
    for (int k = 0; k < K; ++k) ops.p[k] = static_cast<const D*>(in[k]->raw_data());
    const int64_t vectors = n / Pack16<D>::kCount;
    DeviceGuard guard(out.device());
    map_vectors_kernel<D, K, F> MT_LAUNCH(grid_for(std::max<int64_t>(vectors, 1)), kThreads, 0, stream_of(out))(
        vectors, n, static_cast<D*>(out.raw_data()), ops, f);
    check_launch(what);
    return;
  }
  StridedView o = view_of(out);
  std::array<StridedView, K> v;
  for (int k = 0; k < K; ++k) v[k] = view_of(*in[k]);
  for_each_index(out.device(), n, [=] __device__(int64_t i) {
    D x[K];
#pragma unroll
    for (int k = 0; k < K; ++k) x[k] = *at<D>(v[k], i);
    *at<D>(o, i) = apply_loaded<D, K>(f, x);
  }, what);
}

// ---- block reductions (blockDim.x a multiple of 32, at most 1024)
template <typename C>
__device__ __forceinline__ C warp_sum(C v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <typename C>
__device__ __forceinline__ C warp_max(C v) {
  for (int o = 16; o > 0; o >>= 1) {
    const C other = __shfl_xor_sync(0xffffffffu, v, o);
    v = (other > v || other != other) ? other : v;  // NaN propagates
  }
  return v;
}

// The sum (or max) of v over the block, returned to every thread. `scratch` holds 32 values. Every
// thread of the block must call it. Two calls in a row may share `scratch`: each call synchronises
// the block before writing it, after every thread has read the previous call's values.
template <typename C>
__device__ C block_sum(C v, C* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : C(0);
  return warp_sum(v);
}
template <typename C>
__device__ C block_max(C v, C* scratch, C lowest) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : lowest;
  return warp_max(v);
}

}  // namespace mixtrain::kernels::cuda
