// conv2d kernels: oneDNN convolution_forward / convolution_backward_data /
// convolution_backward_weights for fp32 and bf16, the fp32 route for fp16 (and bf16 where Bf16Path
// says so), reference loops for fp64 and for degenerate (empty) shapes.
//
// Accumulation dtype: fp32 (oneDNN accumulates bf16 products in fp32), fp64 for fp64; 16-bit
// results are rounded once on store. bf16 weight and bias gradients are produced in bf16, the
// weight's dtype.
//
// Memory formats: the user tensors are plain NCHW / OIHW (GOIHW with groups). The primitives are
// created with format "any", so oneDNN picks its blocked layouts (nChw16c, OIhw16i16o, ...) and the
// fast direct/JIT kernels; each argument whose chosen layout differs from the plain one goes through
// a cached reorder into a scratch buffer. Measured on this machine (docs/performance.md), plain
// formats select oneDNN's im2col+GEMM kernels, 1.5x slower forward and up to 10x slower backward-
// weights than blocked ones including the reorders. Each (shapes, dtype, bias, direction) entry
// caches the convolution primitive together with its reorders.
#include <memory>
#include <optional>
#include <vector>

#include "kernels/conv.h"
#include "kernels/copy.h"
#include "kernels/cpu/ref/linalg_ref.h"
#include "kernels/linalg.h"
#include "kernels/onednn/common.h"
#include "kernels/onednn/primitive_cache.h"

namespace mixtrain::kernels {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

enum class ConvKind : int64_t { kForward, kBackwardData, kBackwardWeights };

// Everything a conv primitive depends on. int64 fields only (see primitive_cache.h).
struct ConvKey {
  int64_t kind;
  int64_t N, C, H, W, O, KH, KW, Ho, Wo;
  int64_t sh, sw, ph, pw, dh, dw, groups;
  int64_t dt;       // x, w, y (and their gradients)
  int64_t bias_dt;  // -1: no bias
};

// One primitive argument: its plain (user) layout, the layout the primitive chose, and the reorder
// between them when they differ.
struct ConvArg {
  int arg;
  bool output;
  memory::desc user_md, prim_md;
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

ConvArg make_arg(int arg, bool output, const memory::desc& user_md, const memory::desc& prim_md) {
  ConvArg a{arg, output, user_md, prim_md, std::nullopt, {}};
  if (user_md != prim_md) {
    auto& eng = onednn::engine();
    dnnl::reorder::primitive_desc rpd = output ? dnnl::reorder::primitive_desc(eng, prim_md, eng, user_md, onednn::base_attr())
                                               : dnnl::reorder::primitive_desc(eng, user_md, eng, prim_md, onednn::base_attr());
    a.reorder = dnnl::reorder(rpd);
    a.reorder_pd = rpd;
  }
  return a;
}

EntryPtr create(const ConvKey& k) {
  const auto dt = static_cast<memory::data_type>(k.dt);
  const memory::dims src_dims{k.N, k.C, k.H, k.W}, dst_dims{k.N, k.O, k.Ho, k.Wo};
  const bool grouped = k.groups > 1;
  const memory::dims wei_dims = grouped ? memory::dims{k.groups, k.O / k.groups, k.C / k.groups, k.KH, k.KW}
                                        : memory::dims{k.O, k.C, k.KH, k.KW};
  const memory::desc src_user(src_dims, dt, tag::nchw), dst_user(dst_dims, dt, tag::nchw);
  const memory::desc wei_user(wei_dims, dt, grouped ? tag::goihw : tag::oihw);
  const memory::desc src_any(src_dims, dt, tag::any), dst_any(dst_dims, dt, tag::any), wei_any(wei_dims, dt, tag::any);
  const bool has_bias = k.bias_dt >= 0;
  const memory::desc bias_md = has_bias ? memory::desc({k.O}, static_cast<memory::data_type>(k.bias_dt), tag::x)
                                        : memory::desc();
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
      e.args.push_back(make_arg(DNNL_ARG_SRC, false, src_user, fpd.src_desc()));
      e.args.push_back(make_arg(DNNL_ARG_WEIGHTS, false, wei_user, fpd.weights_desc()));
      if (has_bias) e.args.push_back(make_arg(DNNL_ARG_BIAS, false, bias_md, fpd.bias_desc()));
      e.args.push_back(make_arg(DNNL_ARG_DST, true, dst_user, fpd.dst_desc()));
      break;
    }
    case ConvKind::kBackwardData: {
      using bwd = dnnl::convolution_backward_data;
      bwd::primitive_desc pd(bwd::desc(algo, src_any, wei_any, dst_any, strides, dilates, pad_l, pad_r), attr, eng, fpd);
      e.pd = pd;
      e.prim = bwd(pd);
      e.args.push_back(make_arg(DNNL_ARG_DIFF_DST, false, dst_user, pd.diff_dst_desc()));
      e.args.push_back(make_arg(DNNL_ARG_WEIGHTS, false, wei_user, pd.weights_desc()));
      e.args.push_back(make_arg(DNNL_ARG_DIFF_SRC, true, src_user, pd.diff_src_desc()));
      break;
    }
    case ConvKind::kBackwardWeights: {
      using bwd = dnnl::convolution_backward_weights;
      bwd::desc bd = has_bias ? bwd::desc(algo, src_any, wei_any, bias_md, dst_any, strides, dilates, pad_l, pad_r)
                              : bwd::desc(algo, src_any, wei_any, dst_any, strides, dilates, pad_l, pad_r);
      bwd::primitive_desc pd(bd, attr, eng, fpd);
      e.pd = pd;
      e.prim = bwd(pd);
      e.args.push_back(make_arg(DNNL_ARG_DIFF_DST, false, dst_user, pd.diff_dst_desc()));
      e.args.push_back(make_arg(DNNL_ARG_SRC, false, src_user, pd.src_desc()));
      e.args.push_back(make_arg(DNNL_ARG_DIFF_WEIGHTS, true, wei_user, pd.diff_weights_desc()));
      if (has_bias) e.args.push_back(make_arg(DNNL_ARG_DIFF_BIAS, true, bias_md, pd.diff_bias_desc()));
      break;
    }
  }
  return ep;
}

ConvKey make_key(ConvKind kind, const Shape& x, const Shape& w, const Shape& y, const Conv2dGeometry& g, DType dtype,
                 const Tensor& bias) {
  ConvKey k{};
  k.kind = static_cast<int64_t>(kind);
  k.N = x[0], k.C = x[1], k.H = x[2], k.W = x[3];
  k.O = w[0], k.KH = w[2], k.KW = w[3];
  k.Ho = y[2], k.Wo = y[3];
  k.sh = g.stride_h, k.sw = g.stride_w, k.ph = g.pad_h, k.pw = g.pad_w, k.dh = g.dil_h, k.dw = g.dil_w;
  k.groups = g.groups;
  k.dt = static_cast<int64_t>(onednn::to_dnnl(dtype));
  k.bias_dt = bias.defined() ? static_cast<int64_t>(onednn::to_dnnl(bias.dtype())) : -1;
  return k;
}

// Runs the cached primitive on `tensors` (one per entry arg, same order), reordering as needed.
void run(const ConvKey& key, const std::vector<const Tensor*>& tensors) {
  EntryPtr ep = cache().get(key, [&] { return create(key); });
  const ConvEntry& e = *ep;
  MT_INTERNAL_ASSERT(tensors.size() == e.args.size());
  std::unordered_map<int, memory> args;
  std::vector<Tensor> buffers;  // scratch for reordered arguments, alive until the end
  buffers.reserve(e.args.size());
  for (size_t i = 0; i < e.args.size(); ++i) {
    const ConvArg& a = e.args[i];
    if (!a.reorder) {
      args[a.arg] = onednn::wrap(a.user_md, *tensors[i]);
      continue;
    }
    buffers.push_back(Tensor::empty({static_cast<int64_t>(a.prim_md.get_size())}, kUInt8));
    args[a.arg] = onednn::wrap(a.prim_md, buffers.back());
    if (!a.output) {
      std::unordered_map<int, memory> r{{DNNL_ARG_FROM, onednn::wrap(a.user_md, *tensors[i])}, {DNNL_ARG_TO, args[a.arg]}};
      onednn::execute(*a.reorder, a.reorder_pd, r);
    }
  }
  onednn::execute(e.prim, e.pd, args);
  for (size_t i = 0; i < e.args.size(); ++i) {
    const ConvArg& a = e.args[i];
    if (!a.reorder || !a.output) continue;
    std::unordered_map<int, memory> r{{DNNL_ARG_FROM, args[a.arg]}, {DNNL_ARG_TO, onednn::wrap(a.user_md, *tensors[i])}};
    onednn::execute(*a.reorder, a.reorder_pd, r);
  }
}

bool degenerate(const Tensor& x, const Tensor& w, const Tensor& y) {
  return x.numel() == 0 || w.numel() == 0 || y.numel() == 0;
}

bool use_fp32_route(DType dtype) {
  return dtype == kFloat16 || (dtype == kBFloat16 && bf16_path() == Bf16Path::kFp32);
}

Tensor f32(const Tensor& t) { return t.defined() ? t.detach().to(kFloat32) : Tensor(); }
Tensor f32_like(const Tensor& t) { return t.defined() ? Tensor::empty(t.shape(), kFloat32, t.device()) : Tensor(); }

void forward_onednn(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv2dGeometry& g) {
  if (degenerate(x, w, y)) return ref::conv2d_forward(x, w, bias, y, g);
  if (use_fp32_route(x.dtype())) {
    Tensor y32 = f32_like(y);
    forward_onednn(f32(x), f32(w), f32(bias), y32, g);
    return copy(y, y32);
  }
  ConvKey key = make_key(ConvKind::kForward, x.shape(), w.shape(), y.shape(), g, x.dtype(), bias);
  if (bias.defined()) return run(key, {&x, &w, &bias, &y});
  run(key, {&x, &w, &y});
}

void backward_data_onednn(const Tensor& gy, const Tensor& w, const Tensor& gx, const Conv2dGeometry& g) {
  if (degenerate(gx, w, gy)) return ref::conv2d_backward_data(gy, w, gx, g);
  if (use_fp32_route(gy.dtype())) {
    Tensor gx32 = f32_like(gx);
    backward_data_onednn(f32(gy), f32(w), gx32, g);
    return copy(gx, gx32);
  }
  run(make_key(ConvKind::kBackwardData, gx.shape(), w.shape(), gy.shape(), g, gy.dtype(), Tensor()), {&gy, &w, &gx});
}

void backward_weights_onednn(const Tensor& gy, const Tensor& x, const Tensor& gw, const Tensor& gb,
                             const Conv2dGeometry& g) {
  if (degenerate(x, gw, gy)) return ref::conv2d_backward_weights(gy, x, gw, gb, g);
  if (use_fp32_route(gy.dtype())) {
    Tensor gw32 = f32_like(gw), gb32 = f32_like(gb);
    backward_weights_onednn(f32(gy), f32(x), gw32, gb32, g);
    copy(gw, gw32);
    if (gb.defined()) copy(gb, gb32);
    return;
  }
  ConvKey key = make_key(ConvKind::kBackwardWeights, x.shape(), gw.shape(), gy.shape(), g, gy.dtype(), gb);
  if (gb.defined()) return run(key, {&gy, &x, &gw, &gb});
  run(key, {&gy, &x, &gw});
}

}  // namespace

const DispatchTable<Conv2dForwardFn>& conv2d_forward_kernel() {
  static const DispatchTable<Conv2dForwardFn> table = [] {
    DispatchTable<Conv2dForwardFn> t("conv2d");
    for (DType d : {kFloat32, kBFloat16, kFloat16}) t.set(kCPU, d, &forward_onednn);
    t.set(kCPU, kFloat64, &ref::conv2d_forward);
    return t;
  }();
  return table;
}

const DispatchTable<Conv2dBackwardDataFn>& conv2d_backward_data_kernel() {
  static const DispatchTable<Conv2dBackwardDataFn> table = [] {
    DispatchTable<Conv2dBackwardDataFn> t("conv2d backward (data)");
    for (DType d : {kFloat32, kBFloat16, kFloat16}) t.set(kCPU, d, &backward_data_onednn);
    t.set(kCPU, kFloat64, &ref::conv2d_backward_data);
    return t;
  }();
  return table;
}

const DispatchTable<Conv2dBackwardWeightsFn>& conv2d_backward_weights_kernel() {
  static const DispatchTable<Conv2dBackwardWeightsFn> table = [] {
    DispatchTable<Conv2dBackwardWeightsFn> t("conv2d backward (weights)");
    for (DType d : {kFloat32, kBFloat16, kFloat16}) t.set(kCPU, d, &backward_weights_onednn);
    t.set(kCPU, kFloat64, &ref::conv2d_backward_weights);
    return t;
  }();
  return table;
}

std::string conv2d_impl_info(const Shape& x, const Shape& w, bool bias, const Conv2dGeometry& g, DType dtype) {
  Shape y{x[0], w[0], (x[2] + 2 * g.pad_h - g.dil_h * (w[2] - 1) - 1) / g.stride_h + 1,
          (x[3] + 2 * g.pad_w - g.dil_w * (w[3] - 1) - 1) / g.stride_w + 1};
  Tensor b = bias ? Tensor::empty({w[0]}, dtype) : Tensor();
  std::string info;
  for (ConvKind kind : {ConvKind::kForward, ConvKind::kBackwardData, ConvKind::kBackwardWeights}) {
    ConvKey key = make_key(kind, x, w, y, g, dtype, kind == ConvKind::kBackwardData ? Tensor() : b);
    EntryPtr e = cache().get(key, [&] { return create(key); });
    if (!info.empty()) info += ' ';
    info += e->pd.impl_info_str();
  }
  return info;
}

}  // namespace mixtrain::kernels
