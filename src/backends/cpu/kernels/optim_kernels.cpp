// Fused multi-tensor CPU kernels: scale + non-finite check, norm partials, SGD and the Adam/AdamW step
// driver (its per-chunk paths are in adam*.cpp).
//
// Accumulation dtype: fp32 everywhere (fp64 only for fp64 tensors in the scale/norm kernels). Each
// kernel is one template over the storage type, instantiated for float, float16 and bfloat16 by
// one switch; the work list is chunks of kMultiTensorChunk elements over all tensors, run in one
// OpenMP region (Note in optim_kernels.h). The update formulas follow PyTorch's single-tensor
// (foreach=False) implementations operation by operation, so an fp32 run matches PyTorch up to
// the order of fp32 roundings inside one expression.
//
// Vectorisation: contiguous data is processed in blocks of kBlock elements: 16-bit values are
// widened into an fp32 buffer with the bulk converters of half.h (F16C / AVX-512 when present),
// each step of the update is a separate branch-free loop over the buffer (the compiler vectorises
// them; the branches on options sit outside the loops), and the result is rounded back in bulk.
// sqrt is done with _mm_sqrt_ps because GCC only vectorises std::sqrt under -fno-math-errno; both
// are correctly rounded, so the results are the same bits (optim_blocks.h). Adam/AdamW, the
// optimizer most runs use, has an AVX-512 and an AVX2 path besides the block path (adam.h: one file
// each), picked here per chunk by cpu::isa() (tests lower the cap); all three give the same bits,
// which tests check.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels/adam.h"
#include "backends/cpu/kernels/host_ptr.h"
#include "backends/cpu/kernels/optim_blocks.h"
#include "backends/cpu/kernels/register.h"
#include "core/isa_target.h"
#include "kernels/optim.h"
#include "mixtrain/cpu.h"

namespace mixtrain::kernels {
namespace {

using namespace optim_blocks;

struct Chunk {
  int64_t tensor;
  int64_t begin, end;
};

std::vector<Chunk> make_chunks(const std::vector<int64_t>& numels, int64_t* total) {
  std::vector<Chunk> chunks;
  *total = 0;
  for (size_t t = 0; t < numels.size(); ++t) {
    for (int64_t b = 0; b < numels[t]; b += kMultiTensorChunk)
      chunks.push_back({static_cast<int64_t>(t), b, std::min(numels[t], b + kMultiTensorChunk)});
    *total += numels[t];
  }
  return chunks;
}

// Runs body(chunk_index, chunk) over every chunk; one OpenMP region when the work is large enough.
// Bodies must not throw (everything is validated before).
template <typename F>
void run_chunks(const std::vector<Chunk>& chunks, int64_t total, F&& body) {
  const int64_t n = static_cast<int64_t>(chunks.size());
  if (n <= 1 || total <= kGrainSize || omp_get_max_threads() == 1 || omp_in_parallel()) {
    for (int64_t i = 0; i < n; ++i) body(i, chunks[i]);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) body(i, chunks[i]);
}

// Calls run(offset, count, stride) over the runs of elements [begin, end) (row-major order) of t;
// offsets are in elements from t's first element.
template <typename F>
void for_each_run(const Tensor& t, int64_t begin, int64_t end, F&& run) {
  if (t.is_contiguous()) {
    run(begin, end - begin, int64_t{1});
    return;
  }
  StridedLayout<1> layout(t.shape(), {&t.strides()});
  strided_ranges<1>(layout, begin, end,
                    [&](const std::array<int64_t, 1>& off, int64_t count, const std::array<int64_t, 1>& st) {
                      run(off[0], count, st[0]);
                    });
}

template <typename C>
inline bool nonfinite(C v) {
  return !(std::abs(v) <= std::numeric_limits<C>::max());  // true for NaN too
}

// 1 when any of x[0, n) is inf or NaN (branch-free, vectorisable).
inline bool any_nonfinite(const float* x, int64_t n) {
  unsigned bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= static_cast<unsigned>(!(std::abs(x[i]) <= std::numeric_limits<float>::max()));
  return bad != 0;
}

// ------------------------------------------------------------------------------------------------
// Scale and check.

template <typename T>
bool scale_run(T* p, int64_t count, int64_t stride, float factor) {
  if constexpr (kBlockType<T>) {
    if (stride == 1) {
      // Block by block; fp32 in place (one read and, unless factor is 1, one write per element),
      // 16-bit values through an fp32 buffer. The check looks at the values before scaling.
      alignas(64) float buf[kBlock];
      bool bad = false;
      for (int64_t s = 0; s < count; s += kBlock) {
        const int64_t n = std::min(kBlock, count - s);
        float* q = buf;
        if constexpr (std::is_same_v<T, float>)
          q = p + s;
        else
          load_block(p + s, buf, n);
        bad |= any_nonfinite(q, n);
        if (factor == 1.0f) continue;  // check only: PyTorch's kernel skips the multiply when inv_scale == 1
        for (int64_t j = 0; j < n; ++j) q[j] *= factor;
        if constexpr (!std::is_same_v<T, float>) store_block(buf, p + s, n);
      }
      return bad;
    }
  }
  using C = opmath_t<T>;
  bool bad = false;
  const C f = static_cast<C>(factor);
  for (int64_t i = 0; i < count; ++i) {
    C v = convert<C>(p[i * stride]);
    bad |= nonfinite(v);
    if (factor != 1.0f) p[i * stride] = convert<T>(v * f);
  }
  return bad;
}

// ------------------------------------------------------------------------------------------------
// Norm partials.

// Sum of term(|x|) over a run; sixteen independent fp32 accumulators let the compiler vectorise the
// contiguous case without reassociating (the order is fixed by the code, hence deterministic).
template <typename T, typename Term>
float sum_run(const T* p, int64_t count, int64_t stride, Term term) {
  constexpr int kLanes = 16;
  float acc[kLanes] = {};
  int64_t i = 0;
  if constexpr (kBlockType<T>) {
    if (stride == 1) {
      alignas(64) float buf[kBlock];
      for (; i + kLanes <= count; i += kBlock) {
        const int64_t n = std::min(kBlock, (count - i) / kLanes * kLanes);
        load_block(p + i, buf, n);
        for (int64_t b = 0; b < n; b += kLanes)
          for (int l = 0; l < kLanes; ++l) acc[l] += term(std::abs(buf[b + l]));
        if (n < kBlock) {
          i += n;
          break;
        }
      }
    }
  }
  for (; i < count; ++i) acc[i % kLanes] += term(std::abs(convert<float>(p[i * stride])));
  float s = 0.0f;
  for (float a : acc) s += a;
  return s;
}

// sum |x|^p over a run, or max |x| for p = inf (NaN propagates).
template <typename T>
float norm_run(const T* p, int64_t count, int64_t stride, double pnorm) {
  if (std::isinf(pnorm)) {
    float m = 0.0f;
    bool nan = false;
    for (int64_t i = 0; i < count; ++i) {
      float a = std::abs(convert<float>(p[i * stride]));
      nan |= (a != a);
      m = a > m ? a : m;
    }
    return nan ? std::numeric_limits<float>::quiet_NaN() : m;
  }
  if (pnorm == 2.0) return sum_run(p, count, stride, [](float a) { return a * a; });
  if (pnorm == 1.0) return sum_run(p, count, stride, [](float a) { return a; });
  const float pf = static_cast<float>(pnorm);
  return sum_run(p, count, stride, [pf](float a) { return std::pow(a, pf); });
}

// ------------------------------------------------------------------------------------------------
// Optimizer steps.

template <typename T>
void sgd_chunk(const SgdTensors& t, const SgdHyper& h, int64_t b, int64_t e) {
  const ParamBlocks<T> p = param_blocks<T>(t.param, t.master, t.master_low);
  const T* grad = host_ptr<T>(t.grad);
  float* buf_all = t.momentum_buffer.defined() ? host_ptr<float>(t.momentum_buffer) : nullptr;
  const float wd = static_cast<float>(h.weight_decay), mom = static_cast<float>(h.momentum);
  const float one_minus_damp = static_cast<float>(1.0 - h.dampening), neg_lr = static_cast<float>(-h.lr);
  alignas(64) float g[kBlock], x[kBlock];
  for (int64_t s = b; s < e; s += kBlock) {
    const int64_t n = std::min(kBlock, e - s);
    load_grad(grad, s, g, n, h.inv_scale);
    p.load(s, x, n);
    if (wd != 0.0f)
      for (int64_t j = 0; j < n; ++j) g[j] = g[j] + wd * x[j];  // grad.add(param, alpha=weight_decay)
    if (buf_all != nullptr) {
      float* buf = buf_all + s;
      if (t.first_step)  // buf = clone(grad)
        std::memcpy(buf, g, static_cast<size_t>(n) * sizeof(float));
      else  // buf.mul_(momentum).add_(grad, alpha=1-dampening)
        for (int64_t j = 0; j < n; ++j) buf[j] = buf[j] * mom + one_minus_damp * g[j];
      if (h.nesterov)
        for (int64_t j = 0; j < n; ++j) g[j] = g[j] + mom * buf[j];  // grad.add(buf, alpha=momentum)
      else
        std::memcpy(g, buf, static_cast<size_t>(n) * sizeof(float));
    }
    for (int64_t j = 0; j < n; ++j) x[j] = x[j] + neg_lr * g[j];  // param.add_(grad, alpha=-lr)
    p.store(s, x, n);
  }
}

template <typename Tensors>
void check_step_tensors(const Tensors& t, const char* op) {
  MT_INTERNAL_ASSERT(t.param.is_contiguous() && t.grad.is_contiguous() && t.grad.dtype() == t.param.dtype() &&
                         t.grad.numel() == t.param.numel(),
                     op, ": param/grad mismatch");
  MT_INTERNAL_ASSERT(!t.master.defined() || (t.master.dtype() == kFloat32 && t.master.numel() == t.param.numel()), op,
                     ": bad master");
  MT_INTERNAL_ASSERT(!t.master_low.defined() ||
                         (!t.master.defined() && t.param.dtype() == kBFloat16 && t.master_low.dtype() == kUInt8 &&
                          t.master_low.is_contiguous() && t.master_low.numel() == 2 * t.param.numel()),
                     op, ": bad packed master");
}

// Runs chunk_fn<T>(tensors[i], b, e) over all chunks, T being tensors[i].param's storage type.
template <typename Tensors, typename ChunkFn>
void run_step(const std::vector<Tensors>& tensors, ChunkFn&& chunk_fn) {
  std::vector<int64_t> numels;
  numels.reserve(tensors.size());
  for (const auto& t : tensors) numels.push_back(t.param.numel());
  int64_t total = 0;
  std::vector<Chunk> chunks = make_chunks(numels, &total);
  run_chunks(chunks, total, [&](int64_t, const Chunk& c) {
    const Tensors& t = tensors[c.tensor];
    dispatch_param(t.param.dtype(), [&]<typename T>() { chunk_fn.template operator()<T>(t, c.begin, c.end); });
  });
}

// The element counts of gradient tensors for make_chunks; `what` names the operation in the error
// for a tensor that is not float32, float16, bfloat16 or float64.
std::vector<int64_t> floating_numels(const std::vector<Tensor>& tensors, const char* what) {
  std::vector<int64_t> numels;
  numels.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    MT_CHECK(t.is_floating_point(), what, " of gradients: expected float32, float16, bfloat16 or float64, got ",
             describe(t));
    numels.push_back(t.numel());
  }
  return numels;
}

int64_t scale_and_check_cpu(const std::vector<Tensor>& tensors, float factor) {
  int64_t total = 0;
  std::vector<Chunk> chunks = make_chunks(floating_numels(tensors, "scale/unscale"), &total);
  std::vector<uint8_t> bad(chunks.size(), 0);
  run_chunks(chunks, total, [&](int64_t i, const Chunk& c) {
    const Tensor& t = tensors[c.tensor];
    dispatch_floating(t.dtype(), "scale", [&]<typename T>() {
      T* base = static_cast<T*>(host_data(t));
      bool b = false;
      for_each_run(t, c.begin, c.end, [&](int64_t off, int64_t count, int64_t stride) {
        b |= scale_run(base + off, count, stride, factor);
      });
      bad[i] = b;
    });
  });
  for (size_t i = 0; i < chunks.size(); ++i)
    if (bad[i]) return chunks[i].tensor;  // chunks are in tensor order
  return -1;
}

std::vector<float> norm_partials_cpu(const std::vector<Tensor>& tensors, double p) {
  MT_CHECK(p > 0 && !std::isnan(p), "norm: norm_type must be > 0 or inf, got ", p);
  int64_t total = 0;
  std::vector<Chunk> chunks = make_chunks(floating_numels(tensors, "norm"), &total);
  std::vector<float> partial(chunks.size(), 0.0f);
  run_chunks(chunks, total, [&](int64_t i, const Chunk& c) {
    const Tensor& t = tensors[c.tensor];
    dispatch_floating(t.dtype(), "norm", [&]<typename T>() {
      const T* base = static_cast<const T*>(host_data(t));
      float acc = 0.0f;
      bool nan = false;
      for_each_run(t, c.begin, c.end, [&](int64_t off, int64_t count, int64_t stride) {
        float r = norm_run(base + off, count, stride, p);
        nan |= (r != r);
        acc = std::isinf(p) ? std::max(acc, r) : acc + r;
      });
      partial[i] = nan ? std::numeric_limits<float>::quiet_NaN() : acc;
    });
  });
  std::vector<float> out(tensors.size(), 0.0f);
  std::vector<uint8_t> nan(tensors.size(), 0);
  for (size_t i = 0; i < chunks.size(); ++i) {  // chunk order: deterministic
    float& o = out[chunks[i].tensor];
    nan[chunks[i].tensor] |= (partial[i] != partial[i]);
    o = std::isinf(p) ? std::max(o, partial[i]) : o + partial[i];
  }
  for (size_t t = 0; t < out.size(); ++t)
    if (nan[t]) out[t] = std::numeric_limits<float>::quiet_NaN();
  return out;
}

void sgd_step_cpu(const std::vector<SgdTensors>& tensors, const SgdHyper& h) {
  for (const auto& t : tensors) {
    check_step_tensors(t, "sgd_step");
    MT_INTERNAL_ASSERT(h.momentum == 0 || (t.momentum_buffer.defined() && t.momentum_buffer.dtype() == kFloat32),
                       "sgd_step: missing momentum buffer");
  }
  run_step(tensors, [&]<typename T>(const SgdTensors& t, int64_t b, int64_t e) { sgd_chunk<T>(t, h, b, e); });
}

void adam_step_cpu(const std::vector<AdamTensors>& tensors, const AdamHyper& h) {
  for (const auto& t : tensors) {
    check_step_tensors(t, "adam_step");
    MT_INTERNAL_ASSERT(t.exp_avg.defined() && t.exp_avg_sq.defined() && (!h.amsgrad || t.max_exp_avg_sq.defined()),
                       "adam_step: missing moments");
    MT_INTERNAL_ASSERT(t.exp_avg.is_contiguous() && (t.exp_avg.dtype() == kFloat32 || t.exp_avg.dtype() == kBFloat16),
                       "adam_step: exp_avg must be contiguous float32 or bfloat16");
    MT_INTERNAL_ASSERT(t.exp_avg_sq.is_contiguous() &&
                           (t.exp_avg_sq.dtype() == kFloat32 || t.exp_avg_sq.dtype() == kBFloat16),
                       "adam_step: exp_avg_sq must be contiguous float32 or bfloat16");
    MT_INTERNAL_ASSERT(!t.kahan_comp.defined() ||
                           (t.param.dtype() == kBFloat16 && !t.master.defined() && !t.master_low.defined() &&
                            t.kahan_comp.dtype() == kBFloat16 && t.kahan_comp.is_contiguous() &&
                            t.kahan_comp.numel() == t.param.numel()),
                       "adam_step: bad Kahan compensation");
  }
  cpu::Isa isa = cpu::Isa::kGeneric;
#if MT_X86_TARGETS
  isa = cpu::isa();
#endif
  run_step(tensors, [&]<typename T>(const AdamTensors& t, int64_t b, int64_t e) {
    const adam::AdamScalars c = adam::adam_scalars(h, t.step);
    const bool v_bf16 = t.exp_avg_sq.dtype() == kBFloat16;
    // The AVX-512 kernel covers round-to-nearest stores and an fp32 second moment, the AVX2 one every
    // layout.
    const bool plain =
        !v_bf16 && !t.kahan_comp.defined() &&
        !(h.stochastic_rounding && std::is_same_v<T, bfloat16> && !t.master.defined() && !t.master_low.defined());
#if MT_X86_TARGETS
    if (plain && isa >= cpu::Isa::kAvx512) return adam::step_avx512<T>(t, c, b, e);
    if (isa >= cpu::Isa::kAvx2) return adam::step_avx2<T>(t, c, h, b, e);
#endif
    adam::step_portable<T>(t, c, h, b, e, /*philox_avx2=*/isa >= cpu::Isa::kAvx2);
  });
}

void unpack_master_cpu(const Tensor& param, const Tensor& low, const Tensor& master) {
  const bfloat16* hi = host_ptr<bfloat16>(param);
  const auto* lo = reinterpret_cast<const uint16_t*>(host_ptr<uint8_t>(low));
  float* out = host_ptr<float>(master);
  for (int64_t i = 0; i < param.numel(); ++i) out[i] = unpack_master(hi[i].x, lo[i]);
}

void pack_master_cpu(const Tensor& master, const Tensor& param, const Tensor& low) {
  const float* in = host_ptr<float>(master);
  bfloat16* hi = host_ptr<bfloat16>(param);
  auto* lo = reinterpret_cast<uint16_t*>(host_ptr<uint8_t>(low));
  for (int64_t i = 0; i < param.numel(); ++i) {
    const PackedMaster packed = pack_master(in[i]);
    hi[i] = bfloat16::from_bits(packed.param_bits);
    lo[i] = packed.low;
  }
}

}  // namespace

void register_cpu_optim(const Registry& r) {
  r.set(scale_and_check_table, kFloat32, &scale_and_check_cpu);
  r.set(norm_partials_table, kFloat32, &norm_partials_cpu);
  r.set(sgd_step_table, kFloat32, &sgd_step_cpu);
  r.set(adam_step_table, kFloat32, &adam_step_cpu);
  r.set(unpack_master_table, kBFloat16, &unpack_master_cpu);
  r.set(pack_master_table, kBFloat16, &pack_master_cpu);
}

}  // namespace mixtrain::kernels
