// Matmul kernels: oneDNN matmul primitives for fp32 and bf16, the fp32 route for fp16 (and for
// bf16 where Bf16Path says so), the reference loop for fp64.
//
// Accumulation dtype: fp32 (oneDNN accumulates bf16 products in fp32; fp16/bf16 operands on the
// fp32 route are widened exactly), fp64 for fp64. 16-bit results are rounded once on store.
//
// Primitives are cached per (shapes, strides, dtypes, bias): the strides are part of the key
// because a oneDNN primitive is compiled for one memory layout. A transposed operand (a .t() view,
// or the B^T / A^T of a backward pass) is described to oneDNN with its strides, so no copy is made;
// layouts oneDNN cannot address (a matrix with neither unit row nor unit column stride) are made
// contiguous first. If oneDNN would run an accepted layout on its slow reference kernel, the cache
// remembers that and the operands are made contiguous instead. Below AVX-512, an operand whose
// stride along K is a multiple of 4 KiB is first copied with a padded stride (see pad_operand).
#include <cstring>
#include <memory>
#include <optional>

#include "core/views.h"
#include "kernels/copy.h"
#include "backends/cpu/kernels/register.h"
#include "backends/cpu/kernels/ref/linalg_ref.h"
#include "kernels/elementwise.h"
#include "kernels/linalg.h"
#include "backends/cpu/kernels/onednn/common.h"
#include "backends/cpu/kernels/onednn/primitive_cache.h"

namespace mixtrain::kernels {
namespace {

using dnnl::memory;

// Everything a matmul primitive depends on. int64 fields only (see primitive_cache.h).
struct MatmulKey {
  int64_t rank;
  int64_t a_dt, b_dt, c_dt, bias_dt;  // bias_dt -1: no bias
  int64_t accumulate;                 // 1: dst += product (a sum post-op)
  int64_t a_dims[kMaxDims], a_strides[kMaxDims];
  int64_t b_dims[kMaxDims], b_strides[kMaxDims];
  int64_t c_dims[kMaxDims];
};

// A reorder of one operand into the same orientation with a padded stride (see pad_operand).
struct PaddedCopy {
  dnnl::reorder prim;
  dnnl::reorder::primitive_desc pd;
  bool column_major;  // the operand's unit stride runs down its columns (a transposed view)
  int64_t stride;     // the copy's stride along K: the operand's plus kPadFloats, so never a multiple of 4 KiB
};

struct MatmulEntry {
  bool reference_only = false;  // oneDNN offers only its reference kernel for this layout
  dnnl::matmul prim;
  dnnl::matmul::primitive_desc pd;
  memory::desc a_md, b_md, bias_md, c_md;
  std::optional<PaddedCopy> pad_a, pad_b;  // operands copied with a padded stride first
};

// Entries are shared, immutable once built: a hit copies one pointer, not the descriptors.
using EntryPtr = std::shared_ptr<const MatmulEntry>;

onednn::PrimitiveCache<MatmulKey, EntryPtr>& cache() {
  static onednn::PrimitiveCache<MatmulKey, EntryPtr> c(1024);
  return c;
}

// dims/strides of one operand as oneDNN will see them.
struct Layout {
  Shape dims, strides;
};

// Describes `t` (rank >= 2) to oneDNN; false when its matrix layout needs a copy.
bool describe_operand(const Tensor& t, Layout& L) {
  const int r = t.dim();
  L.dims = t.shape();
  L.strides = t.strides();
  // An expanded batch dim (stride 0) is a broadcast; size 1 says the same to oneDNN.
  for (int d = 0; d < r - 2; ++d)
    if (L.dims[d] > 1 && L.strides[d] == 0) L.dims[d] = 1;
  const int64_t rows = L.dims[r - 2], cols = L.dims[r - 1];
  int64_t& sr = L.strides[r - 2];
  int64_t& sc = L.strides[r - 1];
  if ((cols == 1 || sc == 1) && (rows == 1 || sr >= cols)) {  // row-major ("ab")
    sc = 1;
    if (rows == 1) sr = cols;
  } else if ((rows == 1 || sr == 1) && (cols == 1 || sc >= rows)) {  // column-major ("ba"): a transpose
    sr = 1;
    if (cols == 1) sc = rows;
  } else {
    return false;
  }
  // Size-1 batch dims are never stepped over; give them a stride past the data so the descriptor
  // looks like an ordinary plain layout.
  int64_t span = sr * (rows - 1) + sc * (cols - 1) + 1;
  for (int d = r - 3; d >= 0; --d) {
    if (L.dims[d] == 1) L.strides[d] = span;
    span += L.strides[d] * (L.dims[d] - 1);
  }
  return true;
}

memory::dims to_dims(const Shape& s) { return memory::dims(s.begin(), s.end()); }

// oneDNN 2.6's AVX2 sgemm ("gemm:jit", what runs below AVX-512) is about twice as slow when it
// walks an operand along K with a stride that is a multiple of 4 KiB and the other side of the
// product is narrow: each step lands in the same L1 sets. Training hits this in the weight
// gradients (dW = dY^T X: a column-major dY^T whose stride is out_features, or a row-major X whose
// stride is in_features) and in the input gradient of a layer with 1024-multiple widths
// (dX = dY W). Measured on an AMD Zen 4 capped to AVX2, 2 threads, reorder time included:
//   - A column-major (stride along K = its column stride), 64 <= N <= 256: copying A with a
//     padded stride took 1.17-2.34x less time (M = 1024-4096, K = 256-2048);
//   - B row-major (stride along K = its row stride), 64 <= M <= 256: 1.44-2.08x less
//     (N = 1024-4096, K = 256-2048).
// Outside those bands (N or M of 32 or >= 384, strides not a multiple of 4 KiB, AVX-512's kernels)
// the copy measured 0.55-1.06x, so the view is used as it is.
constexpr int64_t kPadFloats = 16;  // 64 bytes: keeps the copy's rows cache-line aligned
bool pad_operand(int64_t stride_along_k, int64_t other_side) {
  constexpr int64_t kAliasBytes = 4096;
  return stride_along_k > 1 && stride_along_k * 4 % kAliasBytes == 0 && other_side >= 64 && other_side <= 256;
}

// The reorder that copies a 2-D operand laid out as `l` (one unit stride) with a padded stride.
// The stride grows from the operand's own (not from its width), so the copy's layout, which gets
// its own cache entry, is never padded again.
std::optional<PaddedCopy> padded_copy_for(const memory::desc& md, const Layout& l) {
  const bool column_major = l.strides[0] == 1;
  const int64_t stride = (column_major ? l.strides[1] : l.strides[0]) + kPadFloats;
  const memory::dims padded = column_major ? memory::dims{1, stride} : memory::dims{stride, 1};
  const memory::desc dst(md.dims(), memory::data_type::f32, padded);
  PaddedCopy c{.prim = {}, .pd = dnnl::reorder::primitive_desc(onednn::engine(), md, onednn::engine(), dst),
               .column_major = column_major, .stride = stride};
  c.prim = dnnl::reorder(c.pd);
  return c;
}

void plan_padded_copies(MatmulEntry& e, const MatmulKey& key, const Layout& a, const Layout& b, const Tensor& out) {
  const auto f32 = static_cast<int64_t>(memory::data_type::f32);
  const bool avx2_gemm = onednn::has_isa(dnnl::cpu_isa::avx2) && !onednn::has_isa(dnnl::cpu_isa::avx512_core) &&
                         std::strncmp(e.pd.impl_info_str(), "gemm:jit", 8) == 0;
  if (key.rank != 2 || key.a_dt != f32 || key.b_dt != f32 || !avx2_gemm) return;
  const int64_t m = out.size(0), n = out.size(1);
  const bool a_column_major = a.strides[0] == 1 && a.dims[0] > 1 && a.dims[1] > 1;
  const bool b_row_major = b.strides[1] == 1 && b.dims[0] > 1 && b.dims[1] > 1;
  if (a_column_major && pad_operand(a.strides[1], n)) e.pad_a = padded_copy_for(e.a_md, a);
  if (b_row_major && pad_operand(b.strides[0], m)) e.pad_b = padded_copy_for(e.b_md, b);
}

// `t` copied by `c` into fresh memory with the padded stride; a view of the same shape.
Tensor run_padded_copy(const PaddedCopy& c, const memory::desc& src_md, const Tensor& t) {
  const int64_t rows = t.size(0), cols = t.size(1);
  Tensor view = c.column_major ? views::transpose(views::narrow(Tensor::empty({cols, c.stride}, t.dtype(), t.device()), 1, 0, rows), 0, 1)
                               : views::narrow(Tensor::empty({rows, c.stride}, t.dtype(), t.device()), 1, 0, cols);
  std::unordered_map<int, memory> args{{DNNL_ARG_FROM, onednn::wrap(src_md, t)},
                                       {DNNL_ARG_TO, onednn::wrap(c.pd.dst_desc(), view)}};
  onednn::execute(c.prim, c.pd, args);
  return view;
}

EntryPtr create(const MatmulKey& key, const Layout& a, const Layout& b, const Tensor& bias, const Tensor& out) {
  auto ep = std::make_shared<MatmulEntry>();
  MatmulEntry& e = *ep;
  const int r = static_cast<int>(key.rank);
  e.a_md = memory::desc(to_dims(a.dims), static_cast<memory::data_type>(key.a_dt), to_dims(a.strides));
  e.b_md = memory::desc(to_dims(b.dims), static_cast<memory::data_type>(key.b_dt), to_dims(b.strides));
  e.c_md = memory::desc(to_dims(out.shape()), static_cast<memory::data_type>(key.c_dt), to_dims(out.strides()));
  if (bias.defined()) {
    memory::dims bd(r, 1);
    bd[r - 1] = out.size(-1);
    memory::dims bs(r, bd[r - 1]);  // contiguous strides of [1, ..., 1, m]
    bs[r - 1] = 1;
    e.bias_md = memory::desc(bd, static_cast<memory::data_type>(key.bias_dt), bs);
  }
  dnnl::matmul::desc desc = bias.defined() ? dnnl::matmul::desc(e.a_md, e.b_md, e.bias_md, e.c_md)
                                           : dnnl::matmul::desc(e.a_md, e.b_md, e.c_md);
  dnnl::primitive_attr attr = onednn::base_attr();
  if (key.accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    attr.set_post_ops(sum);
  }
  try {
    e.pd = dnnl::matmul::primitive_desc(desc, attr, onednn::engine());
  } catch (const dnnl::error& err) {
    onednn::rethrow_creation_error(err, detail::concat("matmul ", a.dims, " @ ", b.dims, " -> ", out.shape(), " (",
                                                       out.dtype(), bias.defined() ? ", with bias" : "", ")"));
  }
  if (std::strncmp(e.pd.impl_info_str(), "ref", 3) == 0) {
    e.reference_only = true;
    return ep;
  }
  e.prim = dnnl::matmul(e.pd);
  plan_padded_copies(e, key, a, b, out);
  return ep;
}

// Looks up (or creates) the primitive for these operands; `a`/`b` layouts already described.
EntryPtr lookup(const Layout& a, const Layout& b, const Tensor& a_t, const Tensor& b_t, const Tensor& bias,
                const Tensor& out, bool accumulate) {
  MatmulKey key{};
  key.accumulate = accumulate ? 1 : 0;
  key.rank = out.dim();
  key.a_dt = static_cast<int64_t>(onednn::to_dnnl(a_t.dtype()));
  key.b_dt = static_cast<int64_t>(onednn::to_dnnl(b_t.dtype()));
  key.c_dt = static_cast<int64_t>(onednn::to_dnnl(out.dtype()));
  key.bias_dt = bias.defined() ? static_cast<int64_t>(onednn::to_dnnl(bias.dtype())) : -1;
  for (int d = 0; d < out.dim(); ++d) {
    key.a_dims[d] = a.dims[d];
    key.a_strides[d] = a.strides[d];
    key.b_dims[d] = b.dims[d];
    key.b_strides[d] = b.strides[d];
    key.c_dims[d] = out.size(d);
  }
  return cache().get(key, [&] { return create(key, a, b, bias, out); });
}

// oneDNN matmul of operands with oneDNN dtypes (f32, or bf16 inputs with bf16/f32 output);
// accumulate: out += product.
void run_onednn(const Tensor& a_in, const Tensor& b_in, const Tensor& bias, const Tensor& out,
                bool accumulate = false) {
  Tensor a = a_in, b = b_in;
  Layout la, lb;
  if (!describe_operand(a, la)) describe_operand(a = contiguous(a), la);
  if (!describe_operand(b, lb)) describe_operand(b = contiguous(b), lb);
  EntryPtr ep = lookup(la, lb, a, b, bias, out, accumulate);
  const MatmulEntry& e = *ep;
  if (e.reference_only) {
    MT_INTERNAL_ASSERT(!(a.is_contiguous() && b.is_contiguous()), "oneDNN offers only a reference matmul for ",
                       describe(a), " @ ", describe(b));
    run_onednn(contiguous(a), contiguous(b), bias, out, accumulate);
    return;
  }
  if (e.pad_a || e.pad_b) {  // the padded layouts have their own entry, which pads nothing
    run_onednn(e.pad_a ? run_padded_copy(*e.pad_a, e.a_md, a) : a, e.pad_b ? run_padded_copy(*e.pad_b, e.b_md, b) : b,
               bias, out, accumulate);
    return;
  }
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, onednn::wrap(e.a_md, a)},
                                       {DNNL_ARG_WEIGHTS, onednn::wrap(e.b_md, b)},
                                       {DNNL_ARG_DST, onednn::wrap(e.c_md, out)}};
  if (bias.defined()) args[DNNL_ARG_BIAS] = onednn::wrap(e.bias_md, bias);
  onednn::execute(e.prim, e.pd, args);
}

// Expanded (stride-0) batch dims become size-1 views, so conversions do not materialise them.
Tensor squash_expanded(const Tensor& t) {
  Tensor v = t.detach();
  for (int d = 0; d < t.dim() - 2; ++d)
    if (v.size(d) > 1 && v.stride(d) == 0) v = views::slice(v, d, 0, 1);
  return v;
}

// 16-bit operands widened exactly to fp32 (fp32 ones used as they are), the fp32 primitive, one
// rounding into `out`.
void run_via_fp32(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  Tensor a32 = onednn::to_fp32_same_layout(squash_expanded(a));
  Tensor b32 = onednn::to_fp32_same_layout(squash_expanded(b));
  Tensor bias32 = bias.defined() ? converted(bias.detach(), kFloat32) : Tensor();
  Tensor out32 = out.dtype() == kFloat32 ? out : Tensor::empty(out.shape(), kFloat32, out.device());
  run_onednn(a32, b32, bias32, out32);
  if (!out32.is_same(out)) copy(out, out32);
}

bool is_route_dtype(DType d) { return d == kFloat32 || d == kBFloat16 || d == kFloat16; }

// Shapes oneDNN refuses (an empty K) or that need no work.
bool handle_degenerate(const Tensor& a, const Tensor& bias, const Tensor& out) {
  if (out.numel() == 0) return true;
  if (a.size(-1) != 0) return false;
  if (bias.defined()) {
    copy(out, views::expand(bias, out.shape()));
  } else {
    fill(out, 0.0);
  }
  return true;
}

void matmul_fp32(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  if (!handle_degenerate(a, bias, out)) run_onednn(a, b, bias, out);
}

void matmul_bf16(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  if (handle_degenerate(a, bias, out)) return;
  require_bf16_path_runs("matmul");
  if (bf16_path() == Bf16Path::kNative) {
    run_onednn(a, b, bias, out);
  } else {
    run_via_fp32(a, b, bias, out);
  }
}

void matmul_fp64(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  ref::matmul(a, b, bias, out);
}

void matmul_accumulate_fp32(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.numel() == 0 || a.size(-1) == 0) return;  // adds nothing
  run_onednn(a, b, Tensor(), out, /*accumulate=*/true);
}

// The fp64 reference (gradient checks): the product, then the sum.
void matmul_accumulate_fp64(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.numel() == 0 || a.size(-1) == 0) return;
  Tensor product = Tensor::empty(out.shape(), kFloat64, out.device());
  ref::matmul(a, b, Tensor(), product);
  binary_kernel(BinaryOp::kAdd)(out.device(), kFloat64)(out, out, product, {1.0});
}

// 16-bit a and b, fp32 out (kernels/linalg.h's MatmulWideningFn): oneDNN's bf16 kernels write
// their fp32 accumulators straight into out where the bf16 path is native; elsewhere (fp16, or bf16
// on the fp32 route) the operands are widened exactly and the fp32 kernel runs. The bias is
// widened either way (exact, [m] values).
void matmul_widening(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out, bool accumulate) {
  MT_INTERNAL_ASSERT((a.dtype() == kBFloat16 || a.dtype() == kFloat16) && b.dtype() == a.dtype() &&
                         out.dtype() == kFloat32 && (!bias.defined() || !accumulate),
                     "matmul_widening: unexpected operands ", describe(a), ", ", describe(b), ", ", describe(out),
                     accumulate ? " (accumulate)" : "");
  if (accumulate ? out.numel() == 0 || a.size(-1) == 0 : handle_degenerate(a, bias, out)) return;
  const Tensor bias32 = bias.defined() ? converted(bias.detach(), kFloat32) : Tensor();
  if (a.dtype() == kBFloat16) require_bf16_path_runs("matmul");
  if (a.dtype() == kBFloat16 && bf16_path() == Bf16Path::kNative) {
    run_onednn(a, b, bias32, out, accumulate);
  } else {
    run_onednn(onednn::to_fp32_same_layout(squash_expanded(a)), onednn::to_fp32_same_layout(squash_expanded(b)),
               bias32, out, accumulate);
  }
}

}  // namespace

void matmul_fp32_route_cpu(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out);

void register_onednn_matmul(const Registry& r) {
  r.set(matmul_table, kFloat32, &matmul_fp32);
  r.set(matmul_table, kBFloat16, &matmul_bf16);
  r.set(matmul_table, kFloat16, &matmul_fp32_route_cpu);  // no fp16 GEMM in oneDNN 2.6 on CPU
  for (DType d : {kFloat32, kBFloat16, kFloat16}) r.set(matmul_fp32_route_table, d, &matmul_fp32_route_cpu);
  r.every_dtype(uses_fp32_route_table, &uses_fp32_route);
  r.set(matmul_table, kFloat64, &matmul_fp64);
  r.set(matmul_accumulate_table, kFloat32, &matmul_accumulate_fp32);
  r.set(matmul_accumulate_table, kFloat64, &matmul_accumulate_fp64);
  for (DType d : {kBFloat16, kFloat16}) r.set(matmul_widening_table, d, &matmul_widening);
}

void matmul_fp32_route_cpu(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  MT_INTERNAL_ASSERT(is_route_dtype(a.dtype()) && is_route_dtype(b.dtype()) && is_route_dtype(out.dtype()) &&
                         (!bias.defined() || is_route_dtype(bias.dtype())),
                     "matmul_fp32_route: unexpected dtypes ", describe(a), ", ", describe(b), ", ", describe(out));
  if (!handle_degenerate(a, bias, out)) run_via_fp32(a, b, bias, out);
}

std::string matmul_impl_info(const Tensor& a_in, const Tensor& b_in, const Tensor& bias, const Tensor& out) {
  if (out.dtype() != kFloat32 && out.dtype() != kBFloat16) return "";
  Tensor a = a_in, b = b_in;
  Layout la, lb;
  if (!describe_operand(a, la)) describe_operand(a = contiguous(a), la);
  if (!describe_operand(b, lb)) describe_operand(b = contiguous(b), lb);
  EntryPtr e = lookup(la, lb, a, b, bias, out, /*accumulate=*/false);
  std::string info = e->pd.impl_info_str();
  if (e->pad_a) info += ", A copied with a padded stride";
  if (e->pad_b) info += ", B copied with a padded stride";
  return info;
}

}  // namespace mixtrain::kernels
