// conv2d kernels: oneDNN convolution_forward / convolution_backward_data /
// convolution_backward_weights for fp32 and bf16, the fp32 route for fp16 (and bf16 where Bf16Path
// says so), reference loops for fp64 and for degenerate (empty) shapes.
//
// Accumulation dtype: fp32 (oneDNN accumulates bf16 products in fp32), fp64 for fp64; 16-bit
// results are rounded once on store. Weight and bias gradients are accumulated in fp32 (across
// batch chunks too, see below) and rounded once into the weight's dtype.
//
// Memory formats: the user tensors are plain NCHW / OIHW (GOIHW with groups). The primitives are
// created with format "any", so oneDNN picks its blocked layouts (nChw16c, OIhw16i16o, ...) and the
// fast direct/JIT kernels; each argument whose chosen layout differs from the plain one goes through
// a cached reorder into a scratch buffer. Measured on this machine (docs/performance.md), plain
// formats select oneDNN's im2col+GEMM kernels, 1.5x slower forward and up to 10x slower backward-
// weights than blocked ones including the reorders. Each (shapes, dtype, bias, direction) entry
// caches the convolution primitive together with its reorders.
//
// Batch chunks: every primitive runs on chunks of the batch (kConv2dDefaultChunkBytes, about 1 MiB
// of fp32 activations per chunk), so the blocked-layout copies and, on the fp32 route, the widened
// fp32 copies of 16-bit operands exist for one chunk at a time (small, and in cache while the
// convolution reads them) instead of for the whole batch. Forward and backward-data compute each
// image on its own; backward-weights sums the chunks' fp32 weight gradients in chunk order, and the
// chunk size depends only on the shapes, never on the thread count. Backward runs backward-weights
// and backward-data chunk by chunk together, so gy is converted and reordered once for both.
// With at least two chunks per thread, each thread takes whole chunks (primitives created for one
// thread): one parallel region per call instead of several synchronisations per chunk, which kept
// the threads waiting on each other; every chunk then computes the same bits for any thread count.
//
// 16-bit operands on the fp32 route are widened with mixtrain's converters (exact) into a plain fp32
// chunk and then reordered, and outputs narrowed the same way: oneDNN 2.6's own f16 reorders are
// reference loops (100x slower here) and its bf16 ones slower than convert + fp32 reorder.
#include "core/views.h"
#include "kernels/conv.h"
#include "backends/cpu/kernels/register.h"
#include "backends/cpu/kernels/host_ptr.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <optional>
#include <vector>

#include "kernels/copy.h"
#include "backends/cpu/kernels/ref/linalg_ref.h"
#include "kernels/linalg.h"
#include "backends/cpu/kernels/onednn/common.h"
#include "backends/cpu/kernels/onednn/primitive_cache.h"

namespace mixtrain::kernels {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

enum class ConvKind : int64_t { kForward, kBackwardData, kBackwardWeights };

// Everything a conv primitive depends on. int64 fields only (see primitive_cache.h). N is the
// number of images of one chunk.
struct ConvKey {
  int64_t kind;
  int64_t N, C, H, W, O, KH, KW, Ho, Wo;
  int64_t sh, sw, ph, pw, dh, dw, groups;
  int64_t dt;             // compute dtype of x, w, y and their gradients
  int64_t bias_dt;        // -1: no bias; forward: the bias's compute dtype (gradients are always f32)
  int64_t single_thread;  // 1: for one thread of a parallel region (run() by chunks), 0: all threads
};

// What an argument holds: a batch slice (one chunk of x, y, gx or gy), or a parameter-sized input
// (weight, bias) or output (weight / bias gradient, accumulated over the chunks in fp32).
enum class Role { kBatchIn, kBatchOut, kParamIn, kParamOut };

// One primitive argument: its plain layout in the primitive's data type, the layout the primitive
// chose, and the reorder between them when they differ (into the chosen layout for inputs, out of
// it for outputs).
struct ConvArg {
  int arg;
  Role role;
  memory::desc plain_md, prim_md;
  std::optional<dnnl::reorder> reorder;
  dnnl::primitive_desc_base reorder_pd;
};

struct ConvEntry {
  dnnl::primitive prim;
  dnnl::primitive_desc_base pd;
  std::vector<ConvArg> args;  // in the order the caller passes tensors
};

// Entries are shared, immutable once built: a hit copies one pointer.
using EntryPtr = std::shared_ptr<const ConvEntry>;

onednn::PrimitiveCache<ConvKey, EntryPtr>& cache() {
  static onednn::PrimitiveCache<ConvKey, EntryPtr> c(1024);
  return c;
}

ConvArg make_arg(int arg, Role role, const memory::desc& plain_md, const memory::desc& prim_md) {
  ConvArg a{arg, role, plain_md, prim_md, std::nullopt, {}};
  auto& eng = onednn::engine();
  const bool output = role == Role::kBatchOut || role == Role::kParamOut;
  if (plain_md != prim_md) {
    dnnl::reorder::primitive_desc rpd =
        output ? dnnl::reorder::primitive_desc(eng, prim_md, eng, plain_md, onednn::base_attr())
               : dnnl::reorder::primitive_desc(eng, plain_md, eng, prim_md, onednn::base_attr());
    a.reorder = dnnl::reorder(rpd);
    a.reorder_pd = rpd;
  }
  return a;
}

// oneDNN sizes its kernels (thread decomposition, barriers, scratchpads) for the thread count in
// effect when a primitive is created; one that runs inside a parallel region must be created for
// one thread.
class CreationThreads {
 public:
  explicit CreationThreads(bool single) : previous_(omp_get_max_threads()), single_(single) {
    if (single_) omp_set_num_threads(1);
  }
  ~CreationThreads() {
    if (single_) omp_set_num_threads(previous_);
  }

 private:
  int previous_;
  bool single_;
};

EntryPtr create_entry(const ConvKey& k) {
  const auto dt = static_cast<memory::data_type>(k.dt);
  const auto f32 = memory::data_type::f32;
  const memory::dims src_dims{k.N, k.C, k.H, k.W}, dst_dims{k.N, k.O, k.Ho, k.Wo};
  const bool grouped = k.groups > 1;
  const memory::dims wei_dims =
      grouped ? memory::dims{k.groups, k.O / k.groups, k.C / k.groups, k.KH, k.KW} : memory::dims{k.O, k.C, k.KH, k.KW};
  const tag wei_tag = grouped ? tag::goihw : tag::oihw;
  const memory::desc src_plain(src_dims, dt, tag::nchw), dst_plain(dst_dims, dt, tag::nchw);
  const memory::desc wei_plain(wei_dims, dt, wei_tag), wgrad_plain(wei_dims, f32, wei_tag);
  const memory::desc src_any(src_dims, dt, tag::any), dst_any(dst_dims, dt, tag::any), wei_any(wei_dims, dt, tag::any);
  const memory::desc wgrad_any(wei_dims, f32, tag::any);
  const bool has_bias = k.bias_dt >= 0;
  const memory::desc bias_md =
      has_bias ? memory::desc({k.O}, static_cast<memory::data_type>(k.bias_dt), tag::x) : memory::desc();
  const memory::desc bgrad_md = has_bias ? memory::desc({k.O}, f32, tag::x) : memory::desc();
  // oneDNN counts dilation from 0 and wants the right padding that reproduces the output size;
  // PyTorch's floor rounding can make that negative, and clamping it to 0 gives the same output
  // size (the extra padding is never reached).
  const memory::dims strides{k.sh, k.sw}, dilates{k.dh - 1, k.dw - 1}, pad_l{k.ph, k.pw};
  const memory::dims pad_r{std::max<int64_t>(0, (k.Ho - 1) * k.sh + (k.KH - 1) * k.dh + 1 - k.H - k.ph),
                           std::max<int64_t>(0, (k.Wo - 1) * k.sw + (k.KW - 1) * k.dw + 1 - k.W - k.pw)};
  auto& eng = onednn::engine();
  const dnnl::primitive_attr attr = onednn::base_attr();
  const auto algo = dnnl::algorithm::convolution_direct;
  using fwd = dnnl::convolution_forward;
  fwd::desc fd = has_bias ? fwd::desc(dnnl::prop_kind::forward_training, algo, src_any, wei_any, bias_md, dst_any,
                                      strides, dilates, pad_l, pad_r)
                          : fwd::desc(dnnl::prop_kind::forward_training, algo, src_any, wei_any, dst_any, strides,
                                      dilates, pad_l, pad_r);
  fwd::primitive_desc fpd(fd, attr, eng);
  auto ep = std::make_shared<ConvEntry>();
  ConvEntry& e = *ep;
  switch (static_cast<ConvKind>(k.kind)) {
    case ConvKind::kForward: {
      e.pd = fpd;
      e.prim = fwd(fpd);
      e.args.push_back(make_arg(DNNL_ARG_SRC, Role::kBatchIn, src_plain, fpd.src_desc()));
      e.args.push_back(make_arg(DNNL_ARG_WEIGHTS, Role::kParamIn, wei_plain, fpd.weights_desc()));
      if (has_bias) e.args.push_back(make_arg(DNNL_ARG_BIAS, Role::kParamIn, bias_md, fpd.bias_desc()));
      e.args.push_back(make_arg(DNNL_ARG_DST, Role::kBatchOut, dst_plain, fpd.dst_desc()));
      break;
    }
    case ConvKind::kBackwardData: {
      using bwd = dnnl::convolution_backward_data;
      bwd::primitive_desc pd(bwd::desc(algo, src_any, wei_any, dst_any, strides, dilates, pad_l, pad_r), attr, eng,
                             fpd);
      e.pd = pd;
      e.prim = bwd(pd);
      e.args.push_back(make_arg(DNNL_ARG_DIFF_DST, Role::kBatchIn, dst_plain, pd.diff_dst_desc()));
      e.args.push_back(make_arg(DNNL_ARG_WEIGHTS, Role::kParamIn, wei_plain, pd.weights_desc()));
      e.args.push_back(make_arg(DNNL_ARG_DIFF_SRC, Role::kBatchOut, src_plain, pd.diff_src_desc()));
      break;
    }
    case ConvKind::kBackwardWeights: {
      using bwd = dnnl::convolution_backward_weights;
      bwd::desc bd = has_bias ? bwd::desc(algo, src_any, wgrad_any, bgrad_md, dst_any, strides, dilates, pad_l, pad_r)
                              : bwd::desc(algo, src_any, wgrad_any, dst_any, strides, dilates, pad_l, pad_r);
      bwd::primitive_desc pd(bd, attr, eng, fpd);
      e.pd = pd;
      e.prim = bwd(pd);
      e.args.push_back(make_arg(DNNL_ARG_DIFF_DST, Role::kBatchIn, dst_plain, pd.diff_dst_desc()));
      e.args.push_back(make_arg(DNNL_ARG_SRC, Role::kBatchIn, src_plain, pd.src_desc()));
      e.args.push_back(make_arg(DNNL_ARG_DIFF_WEIGHTS, Role::kParamOut, wgrad_plain, pd.diff_weights_desc()));
      if (has_bias) e.args.push_back(make_arg(DNNL_ARG_DIFF_BIAS, Role::kParamOut, bgrad_md, pd.diff_bias_desc()));
      break;
    }
  }
  return ep;
}

// create_entry, with oneDNN's errors turned into an mt::Error that names the convolution.
EntryPtr create(const ConvKey& k) {
  CreationThreads threads(k.single_thread == 1);
  try {
    return create_entry(k);
  } catch (const dnnl::error& err) {
    static constexpr const char* kKindNames[] = {"conv2d", "conv2d backward (data)", "conv2d backward (weights)"};
    const bool bf16 = static_cast<memory::data_type>(k.dt) == memory::data_type::bf16;
    onednn::rethrow_creation_error(
        err, detail::concat(kKindNames[k.kind], " of input [", k.N, ", ", k.C, ", ", k.H, ", ", k.W, "] and weight [",
                            k.O, ", ", k.C / k.groups, ", ", k.KH, ", ", k.KW, "] in ", bf16 ? "bfloat16" : "float32"));
  }
}

// The dtype the primitives compute in for tensors of `dtype`; throws when a pinned native bf16 path
// cannot run here.
DType compute_dtype(DType dtype) {
  if (dtype == kBFloat16) require_bf16_path_runs("conv2d");
  return uses_fp32_route(dtype) ? kFloat32 : dtype;
}

// The key of a `kind` primitive computing in `cdt`; bias: whether there is one.
ConvKey make_key(ConvKind kind, const Shape& x, const Shape& w, const Shape& y, const Conv2dGeometry& g, DType cdt,
                 bool bias) {
  ConvKey k{};
  k.kind = static_cast<int64_t>(kind);
  k.N = x[0], k.C = x[1], k.H = x[2], k.W = x[3];
  k.O = w[0], k.KH = w[2], k.KW = w[3];
  k.Ho = y[2], k.Wo = y[3];
  k.sh = g.stride_h, k.sw = g.stride_w, k.ph = g.pad_h, k.pw = g.pad_w, k.dh = g.dil_h, k.dw = g.dil_w;
  k.groups = g.groups;
  k.dt = static_cast<int64_t>(onednn::to_dnnl(cdt));
  k.bias_dt = !bias ? -1 : static_cast<int64_t>(onednn::to_dnnl(kind == ConvKind::kBackwardWeights ? kFloat32 : cdt));
  return k;
}

std::atomic<int64_t> g_chunk_bytes{kConv2dDefaultChunkBytes};

// Images per chunk: as many as keep the largest batch argument (in fp32) within the chunk budget,
// then evened out over the chunks so the last one is not a sliver.
int64_t images_per_chunk(const ConvKey& k) {
  const int64_t budget = g_chunk_bytes.load(std::memory_order_relaxed);
  if (budget <= 0) return k.N;
  const int64_t image_bytes = 4 * std::max(k.C * k.H * k.W, k.O * k.Ho * k.Wo);
  const int64_t per = std::clamp<int64_t>(budget / std::max<int64_t>(image_bytes, 1), 1, k.N);
  const int64_t chunks = (k.N + per - 1) / per;
  return (k.N + chunks - 1) / chunks;
}

// A scratch byte buffer of at least `bytes`, reusing `buf` when it is large enough.
void* scratch(Tensor& buf, size_t bytes) {
  if (!buf.defined() || buf.nbytes() < bytes) buf = Tensor::empty({static_cast<int64_t>(bytes)}, kUInt8);
  return host_data(buf);
}

// A scratch tensor of `shape` and `dtype` on `device` (the tensor it stages, which kernels::copy
// converts from or into), reusing `buf` when it already is one.
const Tensor& scratch(Tensor& buf, const Shape& shape, DType dtype, Device device) {
  if (!buf.defined() || buf.shape() != shape || buf.dtype() != dtype || buf.device() != device)
    buf = Tensor::empty(shape, dtype, device);
  return buf;
}

// One primitive of a run() call: its key (N = the whole batch), the tensors of its arguments in
// entry order, and per argument the buffers reused across chunks.
struct Job {
  ConvKey key;
  std::vector<const Tensor*> tensors;
  struct Buffers {
    Tensor stage;  // the plain tensor in the primitive's dtype, when the user tensor has another dtype
    Tensor prim;   // bytes in the primitive's layout, when it is not the plain one
  };
  // Set by run(): the entries of a full chunk (full_n images) and of the last chunk (the same
  // entry when it is full too), their prepared parameter inputs, and per parameter-gradient
  // argument the fp32 partial sums [chunks, numel] of every chunk.
  int64_t full_n = 0;
  EntryPtr entry, last_entry;
  std::unordered_map<int, memory> params, last_params;
  std::vector<Tensor> partials;
};

DType plain_dtype(const ConvArg& a) {
  switch (a.plain_md.data_type()) {
    case memory::data_type::f32: return kFloat32;
    case memory::data_type::bf16: return kBFloat16;
    case memory::data_type::f16: return kFloat16;
    default: MT_INTERNAL_ASSERT(false, "conv2d: unexpected oneDNN data type");
  }
  return kFloat32;
}

// A batch input that several jobs read (gy in backward): converted, and reordered per layout, once
// per chunk.
struct SharedInput {
  const Tensor* user = nullptr;
  bool staged = false;
  Tensor stage;
  struct Laid {
    memory::desc md;
    Tensor buf;
    bool valid;
  };
  std::vector<Laid> laid;
};

// The memory the primitive reads for input argument `a`, from t (plain layout, any floating
// dtype): t itself, t widened into the stage buffer, and/or reordered into the primitive's layout.
// `shared`, when given, holds (and reuses) what other jobs already made of t in this chunk.
memory prepare_input(const ConvArg& a, const Tensor& t, Job::Buffers& b, SharedInput* shared) {
  auto& eng = onednn::engine();
  void* plain = host_data(t);
  if (t.dtype() != plain_dtype(a)) {
    Tensor& stage = shared ? shared->stage : b.stage;
    scratch(stage, t.shape(), plain_dtype(a), t.device());
    if (!shared || !shared->staged) copy(stage, t);
    if (shared) shared->staged = true;
    plain = host_data(stage);
  }
  if (!a.reorder) return memory(a.plain_md, eng, plain);
  Tensor* buf = &b.prim;
  if (shared) {
    auto it = std::find_if(shared->laid.begin(), shared->laid.end(),
                           [&](const SharedInput::Laid& l) { return l.md == a.prim_md; });
    if (it == shared->laid.end()) it = shared->laid.insert(shared->laid.end(), {a.prim_md, Tensor(), false});
    if (it->valid) return memory(a.prim_md, eng, host_data(it->buf));
    it->valid = true;
    buf = &it->buf;
  }
  memory dst(a.prim_md, eng, scratch(*buf, a.prim_md.get_size()));
  std::unordered_map<int, memory> r{{DNNL_ARG_FROM, memory(a.plain_md, eng, plain)}, {DNNL_ARG_TO, dst}};
  onednn::execute(*a.reorder, a.reorder_pd, r);
  return dst;
}

// The memory the primitive writes for batch output `a` whose values go to t: t itself when the
// layout and dtype match, else a scratch buffer that finish_output() moves into t.
memory prepare_output(const ConvArg& a, const Tensor& t, Job::Buffers& b) {
  auto& eng = onednn::engine();
  if (a.reorder) return memory(a.prim_md, eng, scratch(b.prim, a.prim_md.get_size()));
  if (t.dtype() != plain_dtype(a))
    return memory(a.plain_md, eng, host_data(scratch(b.stage, t.shape(), plain_dtype(a), t.device())));
  return memory(a.plain_md, eng, host_data(t));
}

void finish_output(const ConvArg& a, const memory& written, const Tensor& t, Job::Buffers& b) {
  auto& eng = onednn::engine();
  const bool convert = t.dtype() != plain_dtype(a);
  if (a.reorder) {
    void* plain = convert ? host_data(scratch(b.stage, t.shape(), plain_dtype(a), t.device())) : host_data(t);
    std::unordered_map<int, memory> r{{DNNL_ARG_FROM, written}, {DNNL_ARG_TO, memory(a.plain_md, eng, plain)}};
    onednn::execute(*a.reorder, a.reorder_pd, r);
  }
  if (convert) copy(t, b.stage);
}

// The state of one thread running chunks: per job and argument its buffers, and its shared inputs.
struct ChunkState {
  std::vector<std::vector<Job::Buffers>> bufs;        // [job][arg]
  std::vector<std::unordered_map<int, memory>> args;  // [job]
  std::vector<SharedInput> shared;
};

// Runs chunk [n0, n0 + n) of every job in turn with `st`'s buffers; parameter inputs come from
// `params` (prepared once per entry), parameter-gradient partial sums of chunk c go to row c of
// each job's partials.
void run_chunk(std::vector<Job>& jobs, int64_t c, int64_t n0, int64_t n, ChunkState& st) {
  for (SharedInput& s : st.shared) {
    s.staged = false;
    for (auto& l : s.laid) l.valid = false;
  }
  auto shared_of = [&](const Tensor* t) -> SharedInput* {
    for (SharedInput& s : st.shared)
      if (s.user == t) return &s;
    return nullptr;
  };
  for (size_t ji = 0; ji < jobs.size(); ++ji) {
    Job& j = jobs[ji];
    const bool last = n != j.full_n;
    const ConvEntry& e = last ? *j.last_entry : *j.entry;
    std::unordered_map<int, memory>& args = st.args[ji];
    args = last ? j.last_params : j.params;
    for (size_t i = 0; i < e.args.size(); ++i) {
      const ConvArg& a = e.args[i];
      const Tensor& t = *j.tensors[i];
      Job::Buffers& b = st.bufs[ji][i];
      if (a.role == Role::kBatchIn) args[a.arg] = prepare_input(a, views::narrow(t, 0, n0, n), b, shared_of(&t));
      if (a.role == Role::kBatchOut) args[a.arg] = prepare_output(a, views::narrow(t, 0, n0, n), b);
      if (a.role == Role::kParamOut) {
        // The chunk's fp32 gradient goes to row c of the partials, through the reorder when the
        // primitive chose another layout.
        void* dst = a.reorder ? scratch(b.prim, a.prim_md.get_size()) : host_data(views::select(j.partials[i], 0, c));
        args[a.arg] = memory(a.prim_md, onednn::engine(), dst);
      }
    }
    onednn::execute(e.prim, e.pd, args);
    for (size_t i = 0; i < e.args.size(); ++i) {
      const ConvArg& a = e.args[i];
      if (a.role == Role::kBatchOut) finish_output(a, args[a.arg], views::narrow(*j.tensors[i], 0, n0, n), st.bufs[ji][i]);
      if (a.role == Role::kParamOut && a.reorder) {
        std::unordered_map<int, memory> r{
            {DNNL_ARG_FROM, args[a.arg]},
            {DNNL_ARG_TO, memory(a.plain_md, onednn::engine(), host_data(views::select(j.partials[i], 0, c)))}};
        onednn::execute(*a.reorder, a.reorder_pd, r);
      }
    }
  }
}

// Runs `jobs` (primitives over the same batch) chunk by chunk: in each chunk every job in turn, a
// batch input given to several jobs (the same tensor) converted and reordered once. With enough
// chunks, the threads take whole chunks (oneDNN and the conversions then run single-threaded in
// each): one parallel region per call instead of several synchronisations per chunk, and each
// chunk stays in its core's cache. Otherwise chunks run one after another, each on every thread.
void run(std::vector<Job>& jobs) {
  const int64_t N = jobs[0].key.N, per = images_per_chunk(jobs[0].key);
  const int64_t chunks = (N + per - 1) / per, last_n = N - (chunks - 1) * per;
  // Entries and parameter inputs (weights, bias) first, outside any parallel region.
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const bool by_chunk = threads > 1 && chunks >= 2 * threads;
  std::vector<Job::Buffers> param_bufs;  // the memory objects in params point into their tensors
  for (Job& j : jobs) {
    j.full_n = per;
    for (int pass = 0; pass < (last_n == per ? 1 : 2); ++pass) {
      ConvKey key = j.key;
      key.N = pass == 0 ? per : last_n;
      key.single_thread = by_chunk ? 1 : 0;
      EntryPtr e = cache().get(key, [&] { return create(key); });
      MT_INTERNAL_ASSERT(j.tensors.size() == e->args.size());
      (pass == 0 ? j.entry : j.last_entry) = e;
      std::unordered_map<int, memory>& params = pass == 0 ? j.params : j.last_params;
      for (size_t i = 0; i < e->args.size(); ++i) {
        const ConvArg& a = e->args[i];
        if (a.role != Role::kParamIn) continue;
        // A last-chunk primitive that lays a parameter out as the full-chunk one does shares its copy.
        if (pass == 1 && a.prim_md == j.entry->args[i].prim_md)
          params[a.arg] = j.params.at(a.arg);
        else
          params[a.arg] = prepare_input(a, *j.tensors[i], param_bufs.emplace_back(), nullptr);
      }
    }
    if (last_n == per) j.last_entry = j.entry, j.last_params = j.params;
    j.partials.resize(j.tensors.size());
    for (size_t i = 0; i < j.tensors.size(); ++i)
      if (j.entry->args[i].role == Role::kParamOut)
        j.partials[i] = Tensor::empty({chunks, j.tensors[i]->numel()}, kFloat32, j.tensors[i]->device());
  }

  std::vector<ChunkState> states(by_chunk ? threads : 1);
  for (ChunkState& st : states) {
    st.bufs.resize(jobs.size());
    st.args.resize(jobs.size());
    for (size_t ji = 0; ji < jobs.size(); ++ji) {
      st.bufs[ji].resize(jobs[ji].tensors.size());
      for (const Tensor* t : jobs[ji].tensors)
        if (std::none_of(st.shared.begin(), st.shared.end(), [&](const SharedInput& s) { return s.user == t; }))
          st.shared.emplace_back().user = t;
    }
  }
  if (by_chunk) {
    std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t c = 0; c < chunks; ++c) {
      try {
        run_chunk(jobs, c, c * per, std::min(per, N - c * per), states[omp_get_thread_num()]);
      } catch (...) {
#pragma omp critical(mixtrain_conv_error)
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
  } else {
    for (int64_t c = 0; c < chunks; ++c) run_chunk(jobs, c, c * per, std::min(per, N - c * per), states[0]);
  }

  // Parameter gradients: the chunks' fp32 partial sums added in chunk order, rounded once.
  for (Job& j : jobs) {
    for (size_t i = 0; i < j.tensors.size(); ++i) {
      if (!j.partials[i].defined()) continue;
      const Tensor& t = *j.tensors[i];
      MT_INTERNAL_ASSERT(t.is_contiguous());
      sum_rows(j.partials[i], reshaped(t, {t.numel()}));
    }
  }
}

bool degenerate(const Tensor& x, const Tensor& w, const Tensor& y) {
  return x.numel() == 0 || w.numel() == 0 || y.numel() == 0;
}

void forward_onednn(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv2dGeometry& g) {
  if (degenerate(x, w, y)) return ref::conv2d_forward(x, w, bias, y, g);
  std::vector<Job> jobs(1);
  jobs[0].key =
      make_key(ConvKind::kForward, x.shape(), w.shape(), y.shape(), g, compute_dtype(x.dtype()), bias.defined());
  jobs[0].tensors =
      bias.defined() ? std::vector<const Tensor*>{&x, &w, &bias, &y} : std::vector<const Tensor*>{&x, &w, &y};
  run(jobs);
}

void backward_ref(const Tensor& gy, const Tensor& x, const Tensor& w, const Tensor& gx, const Tensor& gw,
                  const Tensor& gb, const Conv2dGeometry& g) {
  if (gx.defined()) ref::conv2d_backward_data(gy, w, gx, g);
  if (gw.defined()) ref::conv2d_backward_weights(gy, x, gw, gb, g);
}

void backward_onednn(const Tensor& gy, const Tensor& x, const Tensor& w, const Tensor& gx, const Tensor& gw,
                     const Tensor& gb, const Conv2dGeometry& g) {
  const Shape& xs = gx.defined() ? gx.shape() : x.shape();
  const Shape& ws = gw.defined() ? gw.shape() : w.shape();
  if (gy.numel() == 0 || xs.numel() == 0 || ws.numel() == 0) return backward_ref(gy, x, w, gx, gw, gb, g);
  const DType cdt = compute_dtype(gy.dtype());
  std::vector<Job> jobs;
  if (gw.defined()) {
    Job& j = jobs.emplace_back();
    j.key = make_key(ConvKind::kBackwardWeights, xs, ws, gy.shape(), g, cdt, gb.defined());
    j.tensors = gb.defined() ? std::vector<const Tensor*>{&gy, &x, &gw, &gb} : std::vector<const Tensor*>{&gy, &x, &gw};
  }
  if (gx.defined()) {
    Job& j = jobs.emplace_back();
    j.key = make_key(ConvKind::kBackwardData, xs, ws, gy.shape(), g, cdt, false);
    j.tensors = {&gy, &w, &gx};
  }
  if (!jobs.empty()) run(jobs);
}

}  // namespace

void register_onednn_conv(const Registry& r) {
  for (DType d : {kFloat32, kBFloat16, kFloat16}) {
    r.set(conv2d_forward_table, d, &forward_onednn);
    r.set(conv2d_backward_table, d, &backward_onednn);
  }
  r.set(conv2d_forward_table, kFloat64, &ref::conv2d_forward);
  r.set(conv2d_backward_table, kFloat64, &backward_ref);
}

std::string conv2d_impl_info(const Shape& x, const Shape& w, bool bias, const Conv2dGeometry& g, DType dtype) {
  Shape y{x[0], w[0], (x[2] + 2 * g.pad_h - g.dil_h * (w[2] - 1) - 1) / g.stride_h + 1,
          (x[3] + 2 * g.pad_w - g.dil_w * (w[3] - 1) - 1) / g.stride_w + 1};
  std::string info;
  for (ConvKind kind : {ConvKind::kForward, ConvKind::kBackwardData, ConvKind::kBackwardWeights}) {
    ConvKey key = make_key(kind, x, w, y, g, dtype, bias && kind != ConvKind::kBackwardData);
    key.N = images_per_chunk(key);
    EntryPtr e = cache().get(key, [&] { return create(key); });
    if (!info.empty()) info += ' ';
    info += e->pd.impl_info_str();
  }
  return info;
}

int64_t set_conv2d_chunk_bytes(int64_t bytes) { return g_chunk_bytes.exchange(bytes); }

}  // namespace mixtrain::kernels
