// CUDA kernels of the optimizers, gradient clipping and the grad scaler (kernels/optim.h).
//
// The optimizer steps are multi-tensor: one launch updates up to kListSize parameters, each block
// one chunk of one parameter, so a model of many small tensors costs a few launches per step. The
// element math is the CPU kernel's, operation for operation, and this file is compiled without FMA
// contraction (CMakeLists.txt), with IEEE division and square root: a step gives the same bits as
// on the CPU, so GradScaler and optimizer trajectories match across devices (tests/cuda checks it).
//
// Host syncs: scale-and-check and the scaler's unscale return the index of the first non-finite
// tensor, which the caller needs on the host: one 8-byte read back per call, the one sync of a step.
#include <cfloat>
#include <cmath>
#include <vector>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/register.h"
#include "kernels/optim.h"
#include "kernels/optim_formulas.h"

namespace mixtrain::kernels::cuda {
namespace {

__device__ __forceinline__ bool nonfinite(float v) { return !(fabsf(v) <= FLT_MAX); }
__device__ __forceinline__ bool nonfinite(double v) { return !(fabs(v) <= DBL_MAX); }

// ---- scale + check: every element times `factor` (not written when factor == 1); the smallest
// index of a tensor that held a non-finite value goes to *first_bad (atomicMin).
template <typename D>
void scale_and_check_one(const Tensor& t, float factor, int64_t index, unsigned long long* first_bad) {
  const StridedView v = view_of(t);
  using C = opmath_t<D>;
  const unsigned long long idx = static_cast<unsigned long long>(index);
  for_each_index(t.device(), t.numel(), [=] __device__(int64_t i) {
    D* p = at<D>(v, i);
    const C x = load(p);
    if (nonfinite(x)) atomicMin(first_bad, idx);
    if (factor != 1.0f) *p = round_to<D>(x * static_cast<C>(factor));
  }, "scale and check");
}

int64_t scale_and_check_cuda(const std::vector<Tensor>& tensors, float factor) {
  const Device device = tensors.front().device();
  DeviceScratch bad(device, sizeof(unsigned long long));
  const unsigned long long none = ~0ull;
  upload(device, bad.as<unsigned long long>(), &none, 1);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    MT_CHECK(t.device() == device, "scale and check: tensors on ", device, " and ", t.device());
    if (t.numel() == 0) continue;
    switch (t.dtype()) {
      case kFloat32: scale_and_check_one<float>(t, factor, static_cast<int64_t>(i), bad.as<unsigned long long>()); break;
      case kFloat64: scale_and_check_one<double>(t, factor, static_cast<int64_t>(i), bad.as<unsigned long long>()); break;
      case kFloat16: scale_and_check_one<__half>(t, factor, static_cast<int64_t>(i), bad.as<unsigned long long>()); break;
      case kBFloat16:
        scale_and_check_one<__nv_bfloat16>(t, factor, static_cast<int64_t>(i), bad.as<unsigned long long>());
        break;
      default: MT_FAIL("scale and check: expected floating-point tensors, got ", describe(t));
    }
  }
  unsigned long long first = 0;
  download(device, &first, bad.as<unsigned long long>(), 1);
  return first == none ? -1 : static_cast<int64_t>(first);
}

// ---- norms: per tensor, sum |x|^p (or max |x|) in fp32, one block per tensor slice, combined by
// a second pass in slice order (deterministic).
constexpr int kNormBlocks = 64;

template <typename D>
__global__ void norm_partial_kernel(StridedView v, int64_t n, double p, float* partials) {
  __shared__ float scratch[32];
  const bool is_max = isinf(p);
  const float pf = static_cast<float>(p);
  float acc = 0.0f;
  bool nan = false;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float a = fabsf(static_cast<float>(load(at<D>(v, i))));
    if (is_max) {
      nan |= a != a;
      acc = a > acc ? a : acc;
    } else {
      acc += p == 2.0 ? a * a : (p == 1.0 ? a : powf(a, pf));
    }
  }
  if (is_max) {
    if (nan) acc = NAN;
    acc = block_max(acc, scratch, 0.0f);
  } else {
    acc = block_sum(acc, scratch);
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void norm_combine_kernel(const float* partials, int tensors, bool is_max, float* out) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= tensors) return;
  float acc = 0.0f;
  for (int b = 0; b < kNormBlocks; ++b) {
    const float v = partials[t * kNormBlocks + b];
    if (is_max) acc = (v > acc || v != v) ? v : acc;
    else acc += v;
  }
  out[t] = acc;
}

std::vector<float> norm_partials_cuda(const std::vector<Tensor>& tensors, double p) {
  const Device device = tensors.front().device();
  const int n = static_cast<int>(tensors.size());
  DeviceScratch partials(device, sizeof(float) * kNormBlocks * n), out(device, sizeof(float) * n);
  DeviceGuard guard(device);
  const cudaStream_t s = mixtrain::cuda::stream(device);
  check(cudaMemsetAsync(partials.as<float>(), 0, sizeof(float) * kNormBlocks * n, s), "norm");
  for (int i = 0; i < n; ++i) {
    const Tensor& t = tensors[i];
    if (t.numel() == 0) continue;
    float* dst = partials.as<float>() + i * kNormBlocks;
    const StridedView v = view_of(t);
    switch (t.dtype()) {
      case kFloat32: norm_partial_kernel<float> MT_LAUNCH(kNormBlocks, kThreads, 0, s)(v, t.numel(), p, dst); break;
      case kFloat64: norm_partial_kernel<double> MT_LAUNCH(kNormBlocks, kThreads, 0, s)(v, t.numel(), p, dst); break;
      case kFloat16: norm_partial_kernel<__half> MT_LAUNCH(kNormBlocks, kThreads, 0, s)(v, t.numel(), p, dst); break;
      case kBFloat16: norm_partial_kernel<__nv_bfloat16> MT_LAUNCH(kNormBlocks, kThreads, 0, s)(v, t.numel(), p, dst); break;
      default: MT_FAIL("clip_grad_norm_: expected floating-point tensors, got ", describe(t));
    }
    check_launch("norm");
  }
  norm_combine_kernel MT_LAUNCH((n + 127) / 128, 128, 0, s)(partials.as<float>(), n, std::isinf(p), out.as<float>());
  check_launch("norm");
  std::vector<float> result(n);
  download(device, result.data(), out.as<float>(), n);
  return result;
}

// ---- optimizer steps, multi-tensor
constexpr int kListSize = 32;
constexpr int64_t kChunk = 65536;  // elements per block

struct ParamSlot {
  void* param = nullptr;
  const void* grad = nullptr;
  float* master = nullptr;
  uint16_t* low = nullptr;
  void* m = nullptr;          // Adam exp_avg (fp32 or bf16) / SGD momentum buffer (fp32)
  float* v = nullptr;         // Adam exp_avg_sq
  float* vmax = nullptr;      // amsgrad
  int64_t numel = 0;
  float neg_step_size = 0, bc2_sqrt = 0;  // Adam's per-parameter bias corrections
  bool first_step = false;                // SGD: the momentum buffer starts as the gradient
};

struct ParamList {
  ParamSlot slot[kListSize];
  int64_t first_block[kListSize + 1] = {};
  int count = 0;
};

__device__ __forceinline__ int slot_of_block(const ParamList& list, int64_t block) {
  int s = 0;
  while (s + 1 < list.count && list.first_block[s + 1] <= block) ++s;
  return s;
}

template <typename D>
__device__ __forceinline__ float load_param(const ParamSlot& p, int64_t i) {
  if (p.master != nullptr) return p.master[i];
  if (p.low != nullptr) {
    uint16_t hi;
    memcpy(&hi, static_cast<const D*>(p.param) + i, 2);
    return __uint_as_float((static_cast<uint32_t>(hi) << 16) | p.low[i]);
  }
  return load(static_cast<const D*>(p.param) + i);
}

template <typename D>
__device__ __forceinline__ void store_param(const ParamSlot& p, int64_t i, float x) {
  if (p.low != nullptr) {
    const uint32_t u = __float_as_uint(x);
    const uint16_t hi = static_cast<uint16_t>(u >> 16);
    memcpy(static_cast<D*>(p.param) + i, &hi, 2);
    p.low[i] = static_cast<uint16_t>(u & 0xffffu);
    return;
  }
  if (p.master != nullptr) p.master[i] = x;
  static_cast<D*>(p.param)[i] = round_to<D>(x);
}

template <typename D, typename M>
__global__ void adam_kernel(ParamList list, AdamConstants c) {
  const int s = slot_of_block(list, blockIdx.x);
  const ParamSlot& p = list.slot[s];
  const int64_t begin = (blockIdx.x - list.first_block[s]) * kChunk;
  const int64_t end = min(begin + kChunk, p.numel);
  M* m_all = static_cast<M*>(p.m);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float g = load(static_cast<const D*>(p.grad) + i);
    if (c.inv != 1.0f) g = g * c.inv;
    float x = load_param<D>(p, i);
    if (c.wd != 0.0f) {
      if (c.decoupled) x = x * c.decay;
      else g = g + c.wd * x;
    }
    float m = load(m_all + i);
    m = c.lerp_low ? m + c.w * (g - m) : g - (g - m) * c.one_minus_w;
    m_all[i] = round_to<M>(m);
    m = load(m_all + i);  // the update reads m as stored
    float v = p.v[i];
    v = v * c.b2 + c.one_minus_b2 * g * g;
    p.v[i] = v;
    float vhat = v;
    if (c.amsgrad) {
      const float vmax = p.vmax[i];
      vhat = (v > vmax || v != v) ? v : vmax;
      p.vmax[i] = vhat;
    }
    const float denom = sqrtf(vhat) / p.bc2_sqrt + c.eps;
    x = x + p.neg_step_size * (m / denom);
    store_param<D>(p, i, x);
  }
}

struct SgdConsts {
  float wd, mom, one_minus_damp, neg_lr, inv;
  bool nesterov, has_momentum;
};

template <typename D>
__global__ void sgd_kernel(ParamList list, SgdConsts c) {
  const int s = slot_of_block(list, blockIdx.x);
  const ParamSlot& p = list.slot[s];
  const int64_t begin = (blockIdx.x - list.first_block[s]) * kChunk;
  const int64_t end = min(begin + kChunk, p.numel);
  float* buf_all = static_cast<float*>(p.m);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float g = load(static_cast<const D*>(p.grad) + i);
    if (c.inv != 1.0f) g = g * c.inv;
    float x = load_param<D>(p, i);
    if (c.wd != 0.0f) g = g + c.wd * x;
    if (c.has_momentum) {
      float buf = p.first_step ? g : buf_all[i] * c.mom + c.one_minus_damp * g;
      buf_all[i] = buf;
      g = c.nesterov ? g + c.mom * buf : buf;
    }
    x = x + c.neg_lr * g;
    store_param<D>(p, i, x);
  }
}

// Launches `launch(list, blocks)` for consecutive groups of at most kListSize parameters.
template <typename Entry, typename Fill, typename Launch>
void for_each_list(const std::vector<Entry>& entries, Fill&& fill, Launch&& launch) {
  ParamList list;
  int64_t blocks = 0;
  auto flush = [&] {
    if (list.count == 0) return;
    list.first_block[list.count] = blocks;
    launch(list, blocks);
    list = ParamList{};
    blocks = 0;
  };
  for (const Entry& e : entries) {
    ParamSlot slot = fill(e);
    if (slot.numel == 0) continue;
    list.first_block[list.count] = blocks;
    list.slot[list.count++] = slot;
    blocks += (slot.numel + kChunk - 1) / kChunk;
    if (list.count == kListSize) flush();
  }
  flush();
}

template <typename Entry>
ParamSlot common_slot(const Entry& t) {
  ParamSlot s;
  s.param = t.param.raw_data();
  s.grad = t.grad.raw_data();
  s.master = t.master.defined() ? static_cast<float*>(t.master.raw_data()) : nullptr;
  s.low = t.master_low.defined() ? static_cast<uint16_t*>(t.master_low.raw_data()) : nullptr;
  s.numel = t.param.numel();
  return s;
}

template <typename Entry>
void check_entry(const Entry& t, const char* op) {
  MT_INTERNAL_ASSERT(t.param.is_contiguous() && t.grad.is_contiguous() && t.grad.dtype() == t.param.dtype() &&
                         t.grad.numel() == t.param.numel() && t.param.device() == t.grad.device(),
                     op, ": param/grad mismatch");
  MT_INTERNAL_ASSERT(!t.master_low.defined() || t.param.dtype() == kBFloat16, op, ": packed master needs bf16");
}

// Calls f.template operator()<D>() for the parameter dtype.
template <typename F>
void dispatch_param(DType dtype, F&& f) {
  switch (dtype) {
    case kFloat32: f.template operator()<float>(); return;
    case kFloat16: f.template operator()<__half>(); return;
    case kBFloat16: f.template operator()<__nv_bfloat16>(); return;
    default: MT_INTERNAL_ASSERT(false, "optimizer kernel: unexpected dtype ", dtype);
  }
}

void adam_step_cuda(const std::vector<AdamTensors>& tensors, const AdamHyper& h) {
  const Device device = tensors.front().param.device();
  const AdamConstants c = adam_constants(h);  // kernels/optim_formulas.h: the CPU's values
  // The CUDA kernel rounds every store to nearest: the stochastic and Kahan modes of bf16 parameters
  // without masters and a bf16 second moment run on the CPU only so far.
  for (const AdamTensors& t : tensors) {
    const bool sr_param = h.stochastic_rounding && t.param.dtype() == kBFloat16 && !t.master.defined() &&
                          !t.master_low.defined();
    MT_CHECK(!sr_param && !t.kahan_comp.defined() && t.exp_avg_sq.dtype() == kFloat32,
             "Adam on CUDA: stochastic rounding, Kahan-compensated bf16 weights and a bf16 second moment are not ",
             "implemented for CUDA tensors yet (they run on the CPU); use fp32 masters (master_weights = true)");
  }
  // Parameters are grouped by (param dtype, moment dtype): one kernel instantiation per group.
  for (DType pd : {kFloat32, kFloat16, kBFloat16})
    for (DType md : {kFloat32, kBFloat16}) {
      std::vector<const AdamTensors*> group;
      for (const AdamTensors& t : tensors) {
        check_entry(t, "adam step");
        if (t.param.dtype() == pd && t.exp_avg.dtype() == md) group.push_back(&t);
      }
      if (group.empty()) continue;
      auto fill = [&](const AdamTensors* t) {
        ParamSlot s = common_slot(*t);
        s.m = t->exp_avg.raw_data();
        s.v = static_cast<float*>(t->exp_avg_sq.raw_data());
        s.vmax = h.amsgrad ? static_cast<float*>(t->max_exp_avg_sq.raw_data()) : nullptr;
        const AdamBiasCorrection bc = adam_bias_correction(h, t->step);
        s.neg_step_size = bc.neg_step_size;
        s.bc2_sqrt = bc.bc2_sqrt;
        return s;
      };
      dispatch_param(pd, [&]<typename D>() {
        DeviceGuard guard(device);
        for_each_list(group, fill, [&](const ParamList& list, int64_t blocks) {
          if (md == kFloat32)
            adam_kernel<D, float> MT_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, mixtrain::cuda::stream(device))(list, c);
          else
            adam_kernel<D, __nv_bfloat16>
                 MT_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, mixtrain::cuda::stream(device))(list, c);
          check_launch("adam step");
        });
      });
    }
}

void sgd_step_cuda(const std::vector<SgdTensors>& tensors, const SgdHyper& h) {
  const Device device = tensors.front().param.device();
  SgdConsts c{};
  c.wd = static_cast<float>(h.weight_decay);
  c.mom = static_cast<float>(h.momentum);
  c.one_minus_damp = static_cast<float>(1.0 - h.dampening);
  c.neg_lr = static_cast<float>(-h.lr);
  c.inv = h.inv_scale;
  c.nesterov = h.nesterov;
  for (DType pd : {kFloat32, kFloat16, kBFloat16})
    for (bool momentum : {false, true}) {
      std::vector<const SgdTensors*> group;
      for (const SgdTensors& t : tensors) {
        check_entry(t, "sgd step");
        if (t.param.dtype() == pd && t.momentum_buffer.defined() == momentum) group.push_back(&t);
      }
      if (group.empty()) continue;
      SgdConsts gc = c;
      gc.has_momentum = momentum;
      auto fill = [&](const SgdTensors* t) {
        ParamSlot s = common_slot(*t);
        s.m = momentum ? t->momentum_buffer.raw_data() : nullptr;
        s.first_step = t->first_step;
        return s;
      };
      dispatch_param(pd, [&]<typename D>() {
        DeviceGuard guard(device);
        for_each_list(group, fill, [&](const ParamList& list, int64_t blocks) {
          sgd_kernel<D> MT_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, mixtrain::cuda::stream(device))(list, gc);
          check_launch("sgd step");
        });
      });
    }
}

// ---- packed masters: fp32 bits = bf16 bits << 16 | low
void unpack_master_cuda(const Tensor& param, const Tensor& low, const Tensor& master) {
  const uint16_t* p = static_cast<const uint16_t*>(param.raw_data());
  const uint16_t* l = static_cast<const uint16_t*>(low.raw_data());
  float* m = static_cast<float*>(master.raw_data());
  for_each_index(param.device(), param.numel(), [=] __device__(int64_t i) {
    m[i] = __uint_as_float((static_cast<uint32_t>(p[i]) << 16) | l[i]);
  }, "unpack master");
}

void pack_master_cuda(const Tensor& master, const Tensor& param, const Tensor& low) {
  const float* m = static_cast<const float*>(master.raw_data());
  uint16_t* p = static_cast<uint16_t*>(param.raw_data());
  uint16_t* l = static_cast<uint16_t*>(low.raw_data());
  for_each_index(param.device(), param.numel(), [=] __device__(int64_t i) {
    const uint32_t u = __float_as_uint(m[i]);
    p[i] = static_cast<uint16_t>(u >> 16);
    l[i] = static_cast<uint16_t>(u & 0xffffu);
  }, "pack master");
}

// ---- the grad scaler (PyTorch's _amp_foreach_non_finite_check_and_unscale_ / _amp_update_scale_)
__global__ void set_found_inf_kernel(const unsigned long long* first_bad, float* found_inf) {
  if (*first_bad != ~0ull) *found_inf = 1.0f;
}

template <typename D>
void unscale_one(const Tensor& t, const float* inv_scale, int64_t index, unsigned long long* first_bad) {
  const StridedView v = view_of(t);
  const unsigned long long idx = static_cast<unsigned long long>(index);
  for_each_index(t.device(), t.numel(), [=] __device__(int64_t i) {
    D* p = at<D>(v, i);
    const auto x = load(p);
    if (nonfinite(x)) atomicMin(first_bad, idx);
    const float inv = *inv_scale;
    if (inv != 1.0f) *p = round_to<D>(x * static_cast<decltype(x)>(inv));
  }, "grad scaler unscale");
}

int64_t amp_unscale_cuda(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale) {
  const Device device = found_inf.device();
  DeviceScratch bad(device, sizeof(unsigned long long));
  const unsigned long long none = ~0ull;
  upload(device, bad.as<unsigned long long>(), &none, 1);
  const float* inv = static_cast<const float*>(inv_scale.raw_data());
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    MT_CHECK(g.device() == device, "grad scaler: gradient on ", g.device(), ", scaler state on ", device);
    if (g.numel() == 0) continue;
    const auto index = static_cast<int64_t>(i);
    switch (g.dtype()) {
      case kFloat32: unscale_one<float>(g, inv, index, bad.as<unsigned long long>()); break;
      case kFloat64: unscale_one<double>(g, inv, index, bad.as<unsigned long long>()); break;
      case kFloat16: unscale_one<__half>(g, inv, index, bad.as<unsigned long long>()); break;
      case kBFloat16: unscale_one<__nv_bfloat16>(g, inv, index, bad.as<unsigned long long>()); break;
      default: MT_FAIL("grad scaler: expected floating-point gradients, got ", describe(g));
    }
  }
  DeviceGuard guard(device);
  set_found_inf_kernel MT_LAUNCH(1, 1, 0, mixtrain::cuda::stream(device))(bad.as<unsigned long long>(),
                                                                   static_cast<float*>(found_inf.raw_data()));
  check_launch("grad scaler unscale");
  unsigned long long first = 0;
  download(device, &first, bad.as<unsigned long long>(), 1);
  return first == none ? -1 : static_cast<int64_t>(first);
}

__global__ void update_scale_kernel(float* s, int32_t* tracker, const float* found_inf, double growth_factor,
                                    double backoff_factor, int64_t growth_interval) {
  if (*found_inf != 0.0f) {
    *s = static_cast<float>(static_cast<double>(*s) * backoff_factor);
    *tracker = 0;
    return;
  }
  const int64_t successful = static_cast<int64_t>(*tracker) + 1;
  if (successful == growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(*s) * growth_factor);
    if (isfinite(grown)) *s = grown;  // never grow to inf
    *tracker = 0;
  } else {
    *tracker = static_cast<int32_t>(successful);
  }
}

void amp_update_scale_cuda(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                           double growth_factor, double backoff_factor, int64_t growth_interval) {
  DeviceGuard guard(scale.device());
  update_scale_kernel MT_LAUNCH(1, 1, 0, stream_of(scale))(
      static_cast<float*>(scale.raw_data()), static_cast<int32_t*>(growth_tracker.raw_data()),
      static_cast<const float*>(found_inf.raw_data()), growth_factor, backoff_factor, growth_interval);
  check_launch("grad scaler update");
}

}  // namespace

void register_cuda_optim(const Registry& r) {
  r.set(scale_and_check_table, kFloat32, &scale_and_check_cuda);
  r.set(norm_partials_table, kFloat32, &norm_partials_cuda);
  r.set(sgd_step_table, kFloat32, &sgd_step_cuda);
  r.set(adam_step_table, kFloat32, &adam_step_cuda);
  r.set(unpack_master_table, kBFloat16, &unpack_master_cuda);
  r.set(pack_master_table, kBFloat16, &pack_master_cuda);
  r.set(amp_unscale_table, kFloat32, &amp_unscale_cuda);
  r.set(amp_update_scale_table, kFloat32, &amp_update_scale_cuda);
}

}  // namespace mixtrain::kernels::cuda
