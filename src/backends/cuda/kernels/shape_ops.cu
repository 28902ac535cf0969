// CUDA row gather and scatter by an integer index (kernels/shape_ops.h): index_select and embedding
// forward and backward, and the index validation shared by the index-taking ops.
//
// scatter_add_rows is deterministic without float atomics: one block per output row scans the
// index in order and each thread accumulates its inner elements in fp32, so every output is summed
// in increasing j as on the CPU (the same bits for fp32 accumulation of the same values).
#include <optional>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/register.h"
#include "kernels/shape_ops.h"

namespace mixtrain::kernels::cuda {
namespace {

// result[0]: the smallest bad position (~0 when none); result[1]: the count of ignored values.
template <typename I>
__global__ void find_bad_kernel(const I* index, int64_t n, int64_t bound, bool has_ignore, int64_t ignore,
                                unsigned long long* result) {
  unsigned long long ignored = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t v = static_cast<int64_t>(index[i]);
    if (has_ignore && v == ignore) ++ignored;
    else if (v < 0 || v >= bound) atomicMin(&result[0], static_cast<unsigned long long>(i));
  }
  if (ignored != 0) atomicAdd(&result[1], ignored);  // integer atomics: the count is exact
}

template <typename I>
struct FindBadIndexAs {
  static IndexCheck run(const Tensor& index, int64_t bound, std::optional<int64_t> ignore) {
    const int64_t n = index.numel();
    if (n == 0) return {};
    const Device device = index.device();
    DeviceScratch result(device, 2 * sizeof(unsigned long long));
    const unsigned long long none = ~0ull;
    const unsigned long long initial[2] = {none, 0};
    upload(device, result.as<unsigned long long>(), initial, 2);
    {
      DeviceGuard guard(device);
      find_bad_kernel<I> MT_LAUNCH(grid_for(n), kThreads, 0, stream_of(index))(static_cast<const I*>(index.raw_data()), n,
                                                                        bound, ignore.has_value(), ignore.value_or(0),
                                                                        result.as<unsigned long long>());
      check_launch("index check");
    }
    unsigned long long found[2] = {0, 0};
    download(device, found, result.as<unsigned long long>(), 2);  // the one read back of a valid index
    IndexCheck c;
    c.ignored = static_cast<int64_t>(found[1]);
    if (found[0] == none) return c;
    I value{};
    download(device, &value, static_cast<const I*>(index.raw_data()) + found[0], 1);  // only on the error path
    c.bad = BadIndex{static_cast<int64_t>(found[0]), static_cast<int64_t>(value)};
    return c;
  }
};

IndexCheck find_bad_index_cuda(const Tensor& index, int64_t bound, std::optional<int64_t> ignore) {
  return dispatch_index(index.dtype(), "index check",
                        [&]<typename I>() { return FindBadIndexAs<I>::run(index, bound, ignore); });
}

// out[o, j, :] = src[o, index[j], :], as bytes.
template <typename D, typename I>
void gather_rows_as(const Tensor& src, const Tensor& index, const Tensor& out, int64_t outer, int64_t inner) {
  const int64_t n = src.numel() / std::max<int64_t>(1, outer * inner), m = index.numel();
  const D* s = static_cast<const D*>(src.raw_data());
  const I* idx = static_cast<const I*>(index.raw_data());
  D* o = static_cast<D*>(out.raw_data());
  for_each_index(out.device(), outer * m * inner, [=] __device__(int64_t e) {
    const int64_t i = e % inner, j = (e / inner) % m, oo = e / (inner * m);
    o[e] = s[(oo * n + static_cast<int64_t>(idx[j])) * inner + i];
  }, "index_select");
}

template <typename T>
struct GatherRows {
  static void run(const Tensor& src, const Tensor& index, const Tensor& out, int64_t outer, int64_t inner) {
    dispatch_index(index.dtype(), "index_select",
                   [&]<typename I>() { gather_rows_as<dev_t<T>, I>(src, index, out, outer, inner); });
  }
};

// One block per (o, k) output row: thread i sums gy[o, j, i] over j with index[j] == k, j increasing.
template <typename D, typename I>
__global__ void scatter_add_rows_kernel(const D* gy, const I* index, D* gx, int64_t n, int64_t m, int64_t inner) {
  const int64_t o = blockIdx.x / n, k = blockIdx.x % n;
  for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
    opmath_t<D> acc = 0;
    for (int64_t j = 0; j < m; ++j)
      if (static_cast<int64_t>(index[j]) == k) acc += load(gy + (o * m + j) * inner + i);
    gx[(o * n + k) * inner + i] = round_to<D>(acc);
  }
}

template <typename T>
struct ScatterAddRows {
  static void run(const Tensor& gy, const Tensor& index, const Tensor& gx, int64_t outer, int64_t inner) {
    using D = dev_t<T>;
    const int64_t n = gx.numel() / std::max<int64_t>(1, outer * inner), m = index.numel();
    if (gx.numel() == 0) return;
    dispatch_index(index.dtype(), "index_select backward", [&]<typename I>() {
      DeviceGuard guard(gx.device());
      const int threads = inner >= 256 ? 256 : 64;
      scatter_add_rows_kernel<D, I> MT_LAUNCH(static_cast<unsigned>(outer * n), threads, 0, stream_of(gx))(
          static_cast<const D*>(gy.raw_data()), static_cast<const I*>(index.raw_data()), static_cast<D*>(gx.raw_data()),
          n, m, inner);
      check_launch("index_select backward");
    });
  }
};

}  // namespace

void register_cuda_shape_ops(const Registry& r) {
  r.every_dtype(find_bad_index_table, &find_bad_index_cuda);  // names an index dtype it refuses
  r.all_dtypes<GatherRows>(gather_rows_table);
  r.floating<ScatterAddRows>(scatter_add_rows);
}

}  // namespace mixtrain::kernels::cuda
