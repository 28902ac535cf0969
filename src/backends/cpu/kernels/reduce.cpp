// CPU reductions (sum/mean, max, argmax) over the middle dim of a contiguous [outer, reduce, inner]
// input.
//
// Accumulation dtype: fp32 for fp32, fp16 and bf16 (16-bit rows are widened by the SIMD converters
// of half.h); fp64 for fp64; int64 for integers and bool. Results are rounded once on store.
//
// Two shapes of loop:
//  - inner == 1 (reduce the innermost, contiguous dim): a row is cut into chunks of kChunk
//    elements; each block of a chunk is summed into kLanes independent accumulators (element j
//    into lane j % kLanes, which the compiler turns into vector adds without reassociating
//    anything), and block partials, lanes and chunks are combined pairwise. Error grows like
//    (kBlock / kLanes + log2 n) ulp.
//  - inner > 1 (reduce an outer dim, e.g. a bias gradient summed over the batch): a tile of kTile
//    outputs accumulates kRowBlock rows at a time into a block buffer (a vectorisable row add), and
//    block buffers are combined pairwise. Error grows like (kRowBlock + log2 rows) ulp.
// Parallelism: tasks are (output range, chunk or row segment); how many segments a reduction is
// cut into depends only on the shape, and segment results are combined in a fixed order, so the
// result is bitwise the same for every thread count.
#pragma GCC optimize("no-math-errno", "no-trapping-math")  // see backends/cpu/kernels/elementwise_loops.h

#include "kernels/reduce.h"
#include "backends/cpu/kernels/register.h"
#include "backends/cpu/kernels/host_ptr.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels/elementwise_loops.h"

namespace mixtrain::kernels {
namespace {

inline constexpr int64_t kChunk = 16384;  // row elements per task / per pairwise leaf
inline constexpr int kLanes = 32;         // independent accumulators per chunk
inline constexpr int64_t kTile = 256;     // outputs per task when reducing an outer dim
inline constexpr int64_t kRowBlock = 32;  // rows per first-level block of the cascade
inline constexpr int64_t kShortRow = 64;  // rows up to this length are summed sequentially
inline constexpr int64_t kMinTasks = 64;  // segments are added until a reduction has this many tasks
static_assert(ew::kBlock % kLanes == 0 && kChunk % ew::kBlock == 0);

template <typename T>
using acc_t = std::conditional_t<std::is_integral_v<T>, int64_t, opmath_t<T>>;

template <typename A>
struct SumOp {
  static constexpr A init() { return A(0); }
  static A combine(A a, A b) { return a + b; }
  static A finish(A v, double scale) {
    if constexpr (std::is_floating_point_v<A>) return v * static_cast<A>(scale);
    return v;
  }
};

template <typename A>
struct MaxOp {
  static constexpr A init() { return -std::numeric_limits<A>::infinity(); }
  static A combine(A a, A b) { return (b != b || b > a) ? b : a; }  // NaN wins and stays
  static A finish(A v, double) { return v; }
};

template <typename Op, typename A>
A combine_pairwise(const A* p, int64_t n, int64_t stride) {
  if (n == 1) return p[0];
  const int64_t h = n / 2;
  return Op::combine(combine_pairwise<Op>(p, h, stride), combine_pairwise<Op>(p + h * stride, n - h, stride));
}

// Pairwise summation of a stream of partial-result vectors (binary-counter cascade): each pushed
// vector merges with the previous one of the same level, so the error grows with log2(count)
// rather than count, at the cost of one extra combine per element of a partial.
template <typename Op, typename A, int Width>
class Cascade {
 public:
  explicit Cascade(int64_t width) : width_(width) {}
  // The vector to fill before push(), initialised to the identity.
  A* next() {
    MT_INTERNAL_ASSERT(depth_ < kLevels, "reduce: cascade overflow");
    std::fill_n(data_[depth_], width_, Op::init());
    return data_[depth_];
  }
  void push() {
    level_[depth_++] = 0;
    while (depth_ >= 2 && level_[depth_ - 1] == level_[depth_ - 2]) {
      merge();
      ++level_[depth_ - 1];
    }
  }
  // The combination of everything pushed, in push order.
  const A* finish() {
    if (depth_ == 0) {
      next();
      push();
    }
    while (depth_ > 1) merge();
    return data_[0];
  }

 private:
  static constexpr int kLevels = 40;  // enough for 2^39 pushes
  void merge() {
    A* into = data_[depth_ - 2];
    const A* from = data_[depth_ - 1];
    for (int64_t j = 0; j < width_; ++j) into[j] = Op::combine(into[j], from[j]);
    --depth_;
  }
  int64_t width_;
  int depth_ = 0;
  int level_[kLevels];
  alignas(64) A data_[kLevels][Width];
};

// One chunk (n <= kChunk) of a contiguous row: each block of ew::kBlock elements goes into kLanes
// lanes (element j into lane j % kLanes: independent accumulators the compiler vectorises without
// reassociating), block lane vectors are combined pairwise, then the lanes pairwise.
template <typename Op, typename T>
acc_t<T> reduce_chunk(const T* x, int64_t n) {
  using A = acc_t<T>;
  alignas(64) A buf[ew::kBlock];
  if (n <= kShortRow) {  // e.g. a softmax-sized last dim: lanes would cost more than they save
    const A* v = ew::load_run<T, A>(x, 1, n, buf);
    A acc = Op::init();
    for (int64_t i = 0; i < n; ++i) acc = Op::combine(acc, v[i]);
    return acc;
  }
  Cascade<Op, A, kLanes> cascade(kLanes);
  for (int64_t s = 0; s < n; s += ew::kBlock) {
    const int64_t m = std::min(ew::kBlock, n - s);
    const A* v = ew::load_run<T, A>(x + s, 1, m, buf);
    A* lanes = cascade.next();
    int64_t i = 0;
    for (; i + kLanes <= m; i += kLanes)
      for (int l = 0; l < kLanes; ++l) lanes[l] = Op::combine(lanes[l], v[i + l]);
    for (int l = 0; i + l < m; ++l) lanes[l] = Op::combine(lanes[l], v[i + l]);
    cascade.push();
  }
  alignas(64) A lanes[kLanes];
  std::copy_n(cascade.finish(), kLanes, lanes);
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) lanes[l] = Op::combine(lanes[l], lanes[l + w]);
  return lanes[0];
}

// Writes finished values to an output of storage type T or A (whichever out's dtype is).
template <typename T>
struct OutWriter {
  using A = acc_t<T>;
  void* data;
  bool as_acc;
  OutWriter(const Tensor& out) : data(host_data(out)), as_acc(out.dtype() != dtype_v<T>) {  // NOLINT
    MT_INTERNAL_ASSERT(!as_acc || out.dtype() == dtype_v<A>, "reduce: output dtype ", out.dtype(), " for input ",
                       dtype_v<T>);
  }
  void put(int64_t i, A v) const {
    if (as_acc)
      static_cast<A*>(data)[i] = v;
    else
      static_cast<T*>(data)[i] = static_cast<T>(v);
  }
  void put_row(int64_t i, const A* v, int64_t n) const {
    if (as_acc)
      std::memcpy(static_cast<A*>(data) + i, v, n * sizeof(A));
    else
      ew::store_run(static_cast<T*>(data) + i, 1, n, v);
  }
};

// inner == 1: out[o] = reduce of row o (length R).
template <typename Op, typename T>
void reduce_rows(const OutWriter<T>& out, const T* x, int64_t O, int64_t R, double scale) {
  using A = acc_t<T>;
  const int64_t chunks = (R + kChunk - 1) / kChunk;
  if (chunks == 1) {
    parallel_for(O, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(R, 1)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) out.put(o, Op::finish(reduce_chunk<Op>(x + o * R, R), scale));
    });
    return;
  }
  std::vector<A> partial(O * chunks);
  parallel_for(O * chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / chunks, c = t % chunks;
      const int64_t start = c * kChunk;
      partial[t] = reduce_chunk<Op>(x + o * R + start, std::min(kChunk, R - start));
    }
  });
  for (int64_t o = 0; o < O; ++o)
    out.put(o, Op::finish(combine_pairwise<Op>(partial.data() + o * chunks, chunks, 1), scale));
}

// inner > 1: out[o, i] = reduce over r of x[o, r, i].
template <typename Op, typename T>
void reduce_columns(const OutWriter<T>& out, const T* x, const ReduceShape& s, double scale) {
  using A = acc_t<T>;
  const int64_t O = s.outer, R = s.reduce, I = s.inner;
  const int64_t tiles = (I + kTile - 1) / kTile;
  // Cut R into segments (each a separate task) only as far as needed for kMinTasks tasks; the count
  // depends on the shape alone.
  int64_t segments = 1;
  if (O * tiles < kMinTasks && R > 4 * kRowBlock) {
    segments = std::min((kMinTasks + O * tiles - 1) / (O * tiles), R / (2 * kRowBlock));
  }
  const int64_t seg_rows = (R + segments - 1) / segments;
  segments = (R + seg_rows - 1) / seg_rows;
  std::vector<A> partial(segments > 1 ? O * segments * I : 0);

  const int64_t tasks = O * tiles * segments;
  const int64_t work_per_task = std::max<int64_t>(1, seg_rows * std::min(I, kTile));
  parallel_for(tasks, std::max<int64_t>(1, kGrainSize / work_per_task), [&](int64_t b, int64_t e) {
    alignas(64) A buf[kTile];
    for (int64_t t = b; t < e; ++t) {
      const int64_t seg = t % segments, tile = (t / segments) % tiles, o = t / (segments * tiles);
      const int64_t i0 = tile * kTile, w = std::min(kTile, I - i0);
      const int64_t r0 = seg * seg_rows, r1 = std::min(R, r0 + seg_rows);
      // kRowBlock rows at a time into a block buffer, block buffers combined pairwise.
      Cascade<Op, A, kTile> cascade(w);
      for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
        A* block = cascade.next();
        for (int64_t r = rb; r < std::min(r1, rb + kRowBlock); ++r) {
          const A* v = ew::load_run<T, A>(x + (o * R + r) * I + i0, 1, w, buf);
          for (int64_t j = 0; j < w; ++j) block[j] = Op::combine(block[j], v[j]);
        }
        cascade.push();
      }
      alignas(64) A total[kTile];
      std::copy_n(cascade.finish(), w, total);
      if (segments == 1) {
        for (int64_t j = 0; j < w; ++j) total[j] = Op::finish(total[j], scale);
        out.put_row(o * I + i0, total, w);
      } else {
        std::copy_n(total, w, partial.data() + (o * segments + seg) * I + i0);
      }
    }
  });
  if (segments == 1) return;
  parallel_for(O * I, kGrainSize / segments + 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t o = k / I, i = k % I;
      out.put(k, Op::finish(combine_pairwise<Op>(partial.data() + o * segments * I + i, segments, I), scale));
    }
  });
}

template <template <typename> class OpT>
struct Reduce {
  template <typename T>
  struct Kernel {
    static void run(const Tensor& out, const Tensor& x, const ReduceShape& s, double scale) {
      using Op = OpT<acc_t<T>>;
      const OutWriter<T> writer(out);
      if (out.numel() == 0) return;
      if (s.reduce == 0) {  // empty reduction: the identity (sum 0; the front-end refuses an empty max)
        for (int64_t i = 0; i < out.numel(); ++i) writer.put(i, Op::finish(Op::init(), scale));
        return;
      }
      const T* p = host_ptr<T>(x);
      if (s.inner == 1) {
        reduce_rows<Op>(writer, p, s.outer, s.reduce, scale);
      } else {
        reduce_columns<Op>(writer, p, s, scale);
      }
    }
  };
};

template <typename T>
struct ArgmaxKernel {
  static void run(const Tensor& out, const Tensor& x, int64_t outer, int64_t reduce) {
    using C = std::conditional_t<ew::is_half_v<T>, float, T>;
    const T* p = host_ptr<T>(x);
    int64_t* o = host_ptr<int64_t>(out);
    parallel_for(outer, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(reduce, 1)), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        const T* r = p + row * reduce;
        C best = static_cast<C>(r[0]);
        int64_t index = 0;
        for (int64_t i = 1; i < reduce; ++i) {
          const C v = static_cast<C>(r[i]);
          // Strictly greater keeps the first maximum; a NaN beats everything but an earlier NaN.
          if (v > best || (v != v && best == best)) {
            best = v;
            index = i;
          }
        }
        o[row] = index;
      }
    });
  }
};

}  // namespace

void register_cpu_reduce(const Registry& r) {
  r.all_dtypes<Reduce<SumOp>::Kernel>(reduce_tables[static_cast<int>(ReduceKind::kSum)]);
  r.floating<Reduce<MaxOp>::Kernel>(reduce_tables[static_cast<int>(ReduceKind::kMax)]);
  r.all_dtypes<ArgmaxKernel>(argmax_table);
}

}  // namespace mixtrain::kernels
