// Kernels that gather and scatter rows by an integer index: index_select and embedding forward
// (gather) and backward (scatter-add), and the index validation the index-taking ops share
// (cross_entropy and nll_loss targets included). src/backends/cpu/kernels/shape_ops.cpp.
#pragma once

#include <cstdint>
#include <optional>

#include "kernels/dispatch.h"
#include "mixtrain/error.h"
#include "mixtrain/tensor.h"

namespace mixtrain::kernels {

// Calls f.template operator()<I>() with I = int32_t or int64_t for an index tensor's dtype.
template <typename F>
decltype(auto) dispatch_index(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case kInt32: return f.template operator()<int32_t>();
    case kInt64: return f.template operator()<int64_t>();
    default: MT_FAIL(op, ": expected an int64 or int32 index tensor, got ", dtype);
  }
}

// The check of a contiguous int32/int64 `index` against [0, bound): `bad` is the first position
// (row-major) whose value is outside it and is not `ignore`, with that value (nullopt when every
// value is valid); `ignored` counts the values equal to `ignore` (cross-entropy's denominator). One
// result, so one copy back on a device.
struct BadIndex {
  int64_t position;
  int64_t value;
};
struct IndexCheck {
  std::optional<BadIndex> bad;
  int64_t ignored = 0;
};
// Keyed by the index's dtype.
using FindBadIndexFn = IndexCheck(const Tensor& index, int64_t bound, std::optional<int64_t> ignore);
MT_KERNEL_TABLE(DispatchTable<FindBadIndexFn>, find_bad_index_table, "index check");
inline IndexCheck check_index(const Tensor& index, int64_t bound, std::optional<int64_t> ignore = std::nullopt) {
  return find_bad_index_table(index.device(), index.dtype())(index, bound, ignore);
}

// out[o, j, :] = src[o, index[j], :] with src viewed as [outer, n, inner] and out as [outer, m, inner]
// (both contiguous, same dtype, any dtype: rows are copied as bytes). index: contiguous int32/int64
// of m values in [0, n), already validated.
// Keyed by src's dtype.
using GatherRowsFn = void(const Tensor& src, const Tensor& index, const Tensor& out, int64_t outer, int64_t inner);
MT_KERNEL_TABLE(DispatchTable<GatherRowsFn>, gather_rows_table, "index_select");
inline void gather_rows(const Tensor& src, const Tensor& index, const Tensor& out, int64_t outer, int64_t inner) {
  gather_rows_table(src.device(), src.dtype())(src, index, out, outer, inner);
}

// gx[o, k, :] = sum over j with index[j] == k of gy[o, j, :], in increasing j (fp32 accumulation,
// fp64 for fp64), zero for rows no index names. Deterministic for any thread count: each output row
// is summed by one thread in index order. gy [outer, m, inner], gx [outer, n, inner], contiguous.
using ScatterAddRowsFn = void(const Tensor& gy, const Tensor& index, const Tensor& gx, int64_t outer, int64_t inner);
MT_KERNEL_TABLE(DispatchTable<ScatterAddRowsFn>, scatter_add_rows, "index_select_backward");

}  // namespace mixtrain::kernels
