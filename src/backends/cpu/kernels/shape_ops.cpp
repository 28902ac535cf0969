// CPU row gather and deterministic row scatter-add (index_select, embedding), and index validation.
//
// Accumulation: the scatter-add sums in fp32 (fp64 for fp64) and rounds once per output row. It
// first groups the positions j by index value (a stable counting sort, so each group is in
// increasing j), then each output row is owned by one thread and summed in group order: repeated
// indices add up identically for any thread count, with no atomics.
#include <cstring>
#include <vector>

#include "backends/cpu/kernels/nn_vec.h"
#include "kernels/shape_ops.h"
#include "backends/cpu/kernels/host_ptr.h"
#include "backends/cpu/kernels/register.h"

namespace mixtrain::kernels {


static IndexCheck find_bad_index_cpu(const Tensor& index, int64_t bound, std::optional<int64_t> ignore) {
  return dispatch_index(index.dtype(), "find_bad_index", [&]<typename I>() -> IndexCheck {
    const I* p = host_ptr<I>(index);
    const int64_t n = index.numel();
    IndexCheck c;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = p[i];
      if (ignore && v == *ignore) {
        ++c.ignored;
      } else if ((v < 0 || v >= bound) && !c.bad) {
        c.bad = BadIndex{i, v};
      }
    }
    return c;
  });
}

static void gather_rows_cpu(const Tensor& src, const Tensor& index, const Tensor& out, int64_t outer, int64_t inner) {
  const int64_t m = index.numel();
  const int64_t n = outer * inner == 0 ? 0 : src.numel() / (outer * inner);
  const size_t row_bytes = static_cast<size_t>(inner) * src.element_size();
  const char* sp = static_cast<const char*>(host_data(src));
  char* op = static_cast<char*>(host_data(out));
  dispatch_index(index.dtype(), "gather_rows", [&]<typename I>() {
    const I* ip = host_ptr<I>(index);
    parallel_for(outer * m, nnvec::row_grain(inner), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t o = r / m, j = r % m;
        std::memcpy(op + r * row_bytes, sp + (o * n + static_cast<int64_t>(ip[j])) * row_bytes, row_bytes);
      }
    });
  });
}

namespace {

// Positions grouped by index value: group k is order[start[k], start[k + 1]), in increasing j.
struct IndexGroups {
  std::vector<int64_t> start, order;
};

template <typename I>
IndexGroups group_by_index(const I* index, int64_t m, int64_t n) {
  IndexGroups g;
  g.start.assign(static_cast<size_t>(n + 1), 0);
  for (int64_t j = 0; j < m; ++j) ++g.start[index[j] + 1];
  for (int64_t k = 0; k < n; ++k) g.start[k + 1] += g.start[k];
  g.order.resize(static_cast<size_t>(m));
  std::vector<int64_t> next(g.start.begin(), g.start.end() - 1);
  for (int64_t j = 0; j < m; ++j) g.order[next[index[j]]++] = j;
  return g;
}

template <typename T>
struct ScatterAddRows {
  static void run(const Tensor& gy, const Tensor& index, const Tensor& gx, int64_t outer, int64_t inner) {
    using F = opmath_t<T>;
    const int64_t m = index.numel();
    const int64_t n = outer * inner == 0 ? 0 : gx.numel() / (outer * inner);
    const T* gyp = host_ptr<T>(gy);
    T* gxp = host_ptr<T>(gx);
    dispatch_index(index.dtype(), "scatter_add_rows", [&]<typename I>() {
      const IndexGroups g = group_by_index(host_ptr<I>(index), m, n);
      parallel_for(outer * n, nnvec::row_grain(inner), [&](int64_t begin, int64_t end) {
        F* buf = nnvec::scratch<F>(0, inner);
        for (int64_t r = begin; r < end; ++r) {
          const int64_t o = r / n, k = r % n;
          F* acc = nnvec::out_row(gxp + r * inner, buf);
          for (int64_t c = 0; c < inner; ++c) acc[c] = F(0);
          for (int64_t s = g.start[k]; s < g.start[k + 1]; ++s) {
            const T* row = gyp + (o * m + g.order[s]) * inner;
            for (int64_t c = 0; c < inner; ++c) acc[c] += convert<F>(row[c]);
          }
          nnvec::store_row(acc, gxp + r * inner, inner);
        }
      });
    });
  }
};

}  // namespace

void register_cpu_shape_ops(const Registry& r) {
  r.floating<ScatterAddRows>(scatter_add_rows);
  r.every_dtype(find_bad_index_table, &find_bad_index_cpu);  // the kernel names an index dtype it refuses
  r.every_dtype(gather_rows_table, &gather_rows_cpu);
}

}  // namespace mixtrain::kernels
