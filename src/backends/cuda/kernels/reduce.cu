// CUDA reductions (kernels/reduce.h: sum/mean, max and argmax over the middle dim of a contiguous
// [outer, reduce, inner] input) and the linalg sums (kernels/linalg.h: sum_rows, sum_to_size).
//
// Accumulation: fp32 for fp32 and 16-bit, fp64 for fp64, int64 for integers and bool; one rounding
// on store. The order of additions is fixed by the shape (a block's tree over a row, or a thread's
// loop over a column), never by timing, so results are reproducible run to run; they differ from
// the CPU's order in the last bits of fp32 (tests/cuda states the tolerance).
#include <cfloat>

#include "kernels/copy.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/register.h"
#include "kernels/linalg.h"
#include "kernels/reduce.h"

namespace mixtrain::kernels::cuda {
namespace {

template <typename D>
using acc_t = std::conditional_t<std::is_integral_v<D>, int64_t, opmath_t<D>>;

template <typename C>
__device__ __forceinline__ C lowest() {
  if constexpr (std::is_same_v<C, double>) return -static_cast<double>(INFINITY);
  else return -INFINITY;
}

// Stores an accumulated value into out's dtype (x's, or the accumulation dtype).
template <typename Acc>
__device__ __forceinline__ void store_any(char* out, DType dtype, int64_t i, Acc v) {
  switch (dtype) {
    case kFloat32: reinterpret_cast<float*>(out)[i] = static_cast<float>(v); return;
    case kFloat64: reinterpret_cast<double*>(out)[i] = static_cast<double>(v); return;
    case kFloat16: reinterpret_cast<__half*>(out)[i] = round_to<__half>(v); return;
    case kBFloat16: reinterpret_cast<__nv_bfloat16*>(out)[i] = round_to<__nv_bfloat16>(v); return;
    case kInt32: reinterpret_cast<int32_t*>(out)[i] = static_cast<int32_t>(v); return;
    case kInt64: reinterpret_cast<int64_t*>(out)[i] = static_cast<int64_t>(v); return;
    case kUInt8: reinterpret_cast<uint8_t*>(out)[i] = static_cast<uint8_t>(v); return;
    case kBool: reinterpret_cast<bool*>(out)[i] = v != Acc(0); return;
  }
}

template <typename Acc, bool kMax>
__device__ __forceinline__ Acc identity() {
  if constexpr (kMax) return lowest<Acc>();
  else return Acc(0);
}

template <typename Acc, bool kMax>
__device__ __forceinline__ Acc combine(Acc a, Acc b) {
  if constexpr (kMax) return (b > a || b != b) ? b : a;  // NaN propagates
  else return a + b;
}

// One block per output row when inner == 1 (contiguous rows: coalesced, tree-reduced).
template <typename D, bool kMax>
__global__ void reduce_rows_kernel(const D* x, char* out, DType out_dtype, int64_t reduce, double scale) {
  using Acc = acc_t<D>;
  __shared__ Acc scratch[32];
  const D* row = x + blockIdx.x * reduce;
  Acc acc = identity<Acc, kMax>();
  for (int64_t r = threadIdx.x; r < reduce; r += blockDim.x) acc = combine<Acc, kMax>(acc, static_cast<Acc>(load(row + r)));
  if constexpr (kMax) acc = block_max(acc, scratch, lowest<Acc>());
  else acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) {
    if constexpr (!kMax && !std::is_integral_v<Acc>) {
      if (scale != 1.0) acc = acc * static_cast<Acc>(scale);
    }
    store_any(out, out_dtype, blockIdx.x, acc);
  }
}

// One thread per (outer, inner) output when inner > 1: neighbouring threads read neighbouring
// columns.
template <typename D, bool kMax>
__global__ void reduce_columns_kernel(const D* x, char* out, DType out_dtype, ReduceShape s, double scale) {
  using Acc = acc_t<D>;
  const int64_t n = s.outer * s.inner;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = i / s.inner, j = i % s.inner;
    const D* p = x + o * s.reduce * s.inner + j;
    Acc acc = identity<Acc, kMax>();
    for (int64_t r = 0; r < s.reduce; ++r) acc = combine<Acc, kMax>(acc, static_cast<Acc>(load(p + r * s.inner)));
    if constexpr (!kMax && !std::is_integral_v<Acc>) {
      if (scale != 1.0) acc = acc * static_cast<Acc>(scale);
    }
    store_any(out, out_dtype, i, acc);
  }
}

template <bool kMax>
struct Reduce {
  template <typename T>
  struct Kernel {
    static void run(const Tensor& out, const Tensor& x, const ReduceShape& s, double scale) {
      using D = dev_t<T>;
      if (out.numel() == 0) return;
      DeviceGuard guard(x.device());
      const D* px = static_cast<const D*>(x.raw_data());
      char* po = static_cast<char*>(out.raw_data());
      if (s.reduce == 0) {  // empty reduction: the identity (sum 0; max of nothing is refused above)
        fill_table(out.device(), out.dtype())(out, 0.0);
        return;
      }
      if (s.inner == 1) {
        const int threads = s.reduce >= 1024 ? 1024 : (s.reduce >= 256 ? 256 : 64);
        reduce_rows_kernel<D, kMax> MT_LAUNCH(static_cast<unsigned>(s.outer), threads, 0, stream_of(x))(
            px, po, out.dtype(), s.reduce, scale);
      } else {
        reduce_columns_kernel<D, kMax> MT_LAUNCH(grid_for(s.outer * s.inner), kThreads, 0, stream_of(x))(
            px, po, out.dtype(), s, scale);
      }
      check_launch(kMax ? "amax" : "sum");
    }
  };
};

template <typename T>
struct Argmax {
  static void run(const Tensor& out, const Tensor& x, int64_t outer, int64_t reduce) {
    using D = dev_t<T>;
    const D* px = static_cast<const D*>(x.raw_data());
    int64_t* po = static_cast<int64_t*>(out.raw_data());
    for_each_index(x.device(), outer, [=] __device__(int64_t o) {
      const D* row = px + o * reduce;
      int64_t best = 0;
      auto bv = load(row);
      for (int64_t r = 1; r < reduce && bv == bv; ++r) {  // the first NaN wins
        const auto v = load(row + r);
        if (v > bv || v != v) {
          bv = v;
          best = r;
        }
      }
      po[o] = best;
    }, "argmax");
  }
};

// ---- sum_rows: out[j] = sum_i x[i, j] in the CPU's blocked row order (kernels/linalg.h): rows cut
// into blocks of sum_rows_block(rows) rows (at most kSumRowsMaxBlocks blocks), each block summed in
// row order from zero, then the block sums added in block order from zero. The same fp32 additions
// in the same order as the CPU: the same bits. Parallel over columns and row blocks (a bias gradient
// of 16k rows and 768 columns runs 32 x 3 blocks of threads instead of 3), then one pass over the
// block sums.
template <typename D>
__global__ void sum_row_blocks_kernel(const D* x, int64_t rows, int64_t cols, int64_t sr, int64_t sc, int64_t block,
                                      opmath_t<D>* partial) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= cols) return;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * block, end = min(rows, begin + block);
  opmath_t<D> acc = 0;
  for (int64_t i = begin; i < end; ++i) acc += load(x + i * sr + j * sc);
  partial[static_cast<int64_t>(blockIdx.y) * cols + j] = acc;
}

template <typename D>
void sum_rows_as(const Tensor& x, const Tensor& out) {
  using C = opmath_t<D>;
  const int64_t rows = x.size(0), cols = x.size(1), sr = x.stride(0), sc = x.stride(1);
  const Device device = x.device();
  char* po = static_cast<char*>(out.raw_data());
  const DType od = out.dtype();
  if (rows == 0) {
    for_each_index(device, cols, [=] __device__(int64_t j) { store_any(po, od, j, C(0)); }, "sum_rows");
    return;
  }
  const int64_t block = sum_rows_block(rows);
  const int64_t blocks = (rows + block - 1) / block;
  DeviceScratch partial(device, sizeof(C) * static_cast<size_t>(blocks * cols));
  C* pp = partial.as<C>();
  {
    DeviceGuard guard(device);
    const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(blocks));
    sum_row_blocks_kernel<D> MT_LAUNCH(grid, kThreads, 0, stream_of(x))(static_cast<const D*>(x.raw_data()), rows, cols, sr,
                                                                  sc, block, pp);
    check_launch("sum_rows");
  }
  for_each_index(device, cols, [=] __device__(int64_t j) {
    C total = 0;
    for (int64_t b = 0; b < blocks; ++b) total += pp[b * cols + j];
    store_any(po, od, j, total);
  }, "sum_rows");
}

void sum_rows_cuda(const Tensor& x, const Tensor& out) {
  MT_INTERNAL_ASSERT(x.dim() == 2 && out.dim() == 1 && out.size(0) == x.size(1) && out.is_contiguous(),
                     "sum_rows: bad operands");
  dispatch_all(x.dtype(), [&]<typename T>() {
    if constexpr (is_floating_dev_v<dev_t<T>>) sum_rows_as<dev_t<T>>(x, out);
    else MT_INTERNAL_ASSERT(false, "sum_rows: unexpected dtype");
  });
}

// ---- sum_to_size: each output element sums the elements of x that map onto it.
template <typename D>
void sum_to_size_as(const Tensor& x, const Tensor& out) {
  StridedView vx = view_of(x);
  // Split x's dims into kept ones (out's index) and summed ones (out has size 1 there).
  StridedView kept = vx, summed = vx;
  kept.contiguous = summed.contiguous = false;
  kept.ndim = summed.ndim = 0;
  for (int d = 0; d < x.dim(); ++d) {
    StridedView& v = out.size(d) == x.size(d) ? kept : summed;
    v.sizes[v.ndim] = x.size(d);
    v.strides[v.ndim] = x.stride(d);
    ++v.ndim;
  }
  const int64_t per_output = out.numel() == 0 ? 0 : x.numel() / out.numel();
  D* po = static_cast<D*>(out.raw_data());
  for_each_index(x.device(), out.numel(), [=] __device__(int64_t i) {
    const D* base = reinterpret_cast<const D*>(kept.data) + (kept.ndim == 0 ? 0 : element_offset(kept, i));
    opmath_t<D> acc = 0;
    for (int64_t r = 0; r < per_output; ++r) acc += load(base + (summed.ndim == 0 ? 0 : element_offset(summed, r)));
    po[i] = round_to<D>(acc);
  }, "sum_to_size");
}

void sum_to_size_cuda(const Tensor& x, const Tensor& out) {
  MT_INTERNAL_ASSERT(x.dim() == out.dim() && out.is_contiguous() && out.dtype() == x.dtype(), "sum_to_size: bad operands");
  dispatch_all(x.dtype(), [&]<typename T>() {
    if constexpr (is_floating_dev_v<dev_t<T>>) sum_to_size_as<dev_t<T>>(x, out);
    else MT_INTERNAL_ASSERT(false, "sum_to_size: unexpected dtype");
  });
}

}  // namespace

void register_cuda_reduce(const Registry& r) {
  r.all_dtypes<Reduce<false>::Kernel>(reduce_tables[static_cast<int>(ReduceKind::kSum)]);
  r.floating<Reduce<true>::Kernel>(reduce_tables[static_cast<int>(ReduceKind::kMax)]);
  r.all_dtypes<Argmax>(argmax_table);
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    r.set(sum_rows_table, d, &sum_rows_cuda);
    r.set(sum_to_size_table, d, &sum_to_size_cuda);
  }
}

}  // namespace mixtrain::kernels::cuda
