// cuDNN's legacy convolution API on the host (include/cudnn.h): handles and descriptors as plain
// objects known to a registry, the argument rules of the cuDNN API reference checked on every call,
// a heuristic that offers cuDNN's algorithms with the status, determinism and math type cuDNN
// documents for them, and a reference direct convolution for forward, backward data and backward
// filter. Execution is synchronous: the handle's stream has always finished.
#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "backends/cuda/host/device_memory.h"
#include "mixtrain/error.h"
#include "mixtrain/half.h"

// Device memory (device_memory.h): the data and workspace pointers must lie in the device region
// and the scaling factors outside it, and the library holds a DeviceAccess while it reads and writes
// device memory.
using mixtrain::cuda_host::is_device_address;

struct cudnnContext {
  cudaStream_t stream = nullptr;
  int device = 0;
  std::atomic<bool> busy{false};  // a handle serves one host thread at a time
};
// A 4-D tensor: dims n, c, h, w and their strides in elements.
struct cudnnTensorStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int64_t dim[4] = {};
  int64_t stride[4] = {};
};
// A 4-D filter k, c (per group), r, s; KCRS (CUDNN_TENSOR_NCHW), packed.
struct cudnnFilterStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int64_t dim[4] = {};
};
// cudnnCreateConvolutionDescriptor's defaults: one group, CUDNN_DEFAULT_MATH.
struct cudnnConvolutionStruct {
  bool set = false;
  int pad[2] = {}, stride[2] = {}, dilation[2] = {};
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  int groups = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

namespace {

using mixtrain::detail::concat;

thread_local std::string g_last_error;

cudnnStatus_t fail(cudnnStatus_t status, std::string why) {
  g_last_error = std::move(why);
  return status;
}

// The objects cudnnCreate* made and cudnnDestroy* has not yet freed: a destroyed or foreign pointer
// is refused by name instead of being read.
template <typename T>
class Live {
 public:
  void add(T* p) {
    std::lock_guard lock(mu_);
    set_.insert(p);
  }
  bool remove(T* p) {
    std::lock_guard lock(mu_);
    return set_.erase(p) == 1;
  }
  bool contains(const T* p) {
    std::lock_guard lock(mu_);
    return set_.count(const_cast<T*>(p)) == 1;
  }

 private:
  std::mutex mu_;
  std::unordered_set<T*> set_;
};
Live<cudnnContext>& live_handles() {
  static Live<cudnnContext> l;
  return l;
}
Live<cudnnTensorStruct>& live_tensors() {
  static Live<cudnnTensorStruct> l;
  return l;
}
Live<cudnnFilterStruct>& live_filters() {
  static Live<cudnnFilterStruct> l;
  return l;
}
Live<cudnnConvolutionStruct>& live_convs() {
  static Live<cudnnConvolutionStruct> l;
  return l;
}

const char* type_name(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_FLOAT: return "CUDNN_DATA_FLOAT";
    case CUDNN_DATA_DOUBLE: return "CUDNN_DATA_DOUBLE";
    case CUDNN_DATA_HALF: return "CUDNN_DATA_HALF";
    case CUDNN_DATA_INT8: return "CUDNN_DATA_INT8";
    case CUDNN_DATA_INT32: return "CUDNN_DATA_INT32";
    case CUDNN_DATA_INT8x4: return "CUDNN_DATA_INT8x4";
    case CUDNN_DATA_UINT8: return "CUDNN_DATA_UINT8";
    case CUDNN_DATA_UINT8x4: return "CUDNN_DATA_UINT8x4";
    case CUDNN_DATA_INT8x32: return "CUDNN_DATA_INT8x32";
    case CUDNN_DATA_BFLOAT16: return "CUDNN_DATA_BFLOAT16";
    case CUDNN_DATA_INT64: return "CUDNN_DATA_INT64";
    case CUDNN_DATA_BOOLEAN: return "CUDNN_DATA_BOOLEAN";
    case CUDNN_DATA_FP8_E4M3: return "CUDNN_DATA_FP8_E4M3";
    case CUDNN_DATA_FP8_E5M2: return "CUDNN_DATA_FP8_E5M2";
  }
  return nullptr;
}
const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "CUDNN_DEFAULT_MATH";
    case CUDNN_TENSOR_OP_MATH: return "CUDNN_TENSOR_OP_MATH";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION";
    case CUDNN_FMA_MATH: return "CUDNN_FMA_MATH";
  }
  return nullptr;
}
// The data types the host computes with (the others are valid cuDNN types it does not model).
size_t element_bytes(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_FLOAT: return 4;
    case CUDNN_DATA_DOUBLE: return 8;
    case CUDNN_DATA_HALF:
    case CUDNN_DATA_BFLOAT16: return 2;
    default: return 0;
  }
}
// A valid data type enumerant the host computes with: BAD_PARAM for an invalid one, NOT_SUPPORTED
// for a valid one it does not model.
cudnnStatus_t check_type(const char* fn, const char* what, cudnnDataType_t t) {
  if (type_name(t) == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": ", what, " ", static_cast<int>(t), " is not a cudnnDataType_t"));
  if (element_bytes(t) == 0)
    return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE,
                concat(fn, ": ", what, " ", type_name(t),
                       " is not modelled on the host (FLOAT, DOUBLE, HALF and BFLOAT16 are)"));
  return CUDNN_STATUS_SUCCESS;
}

const char* algo_name(cudnnConvolutionFwdAlgo_t a) {
  static const char* const names[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
                                      "WINOGRAD",      "WINOGRAD_NONFUSED"};
  return a >= 0 && a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT ? names[a] : "?";
}
const char* algo_name(cudnnConvolutionBwdDataAlgo_t a) {
  static const char* const names[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  return a >= 0 && a < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT ? names[a] : "?";
}
const char* algo_name(cudnnConvolutionBwdFilterAlgo_t a) {
  static const char* const names[] = {"ALGO_0",    "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                      "FFT_TILING"};
  return a >= 0 && a < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT ? names[a] : "?";
}

// Sizes as cuDNN counts them: at most 2^31 - 1 elements (cudnnSetTensor4dDescriptor and
// cudnnSetFilter4dDescriptor: "exceeds the maximum limit of 2 Giga-elements").
bool within_int(int64_t n) { return n >= 0 && n <= INT_MAX; }

// Saturating size_t arithmetic for workspace sizes.
size_t mul(size_t a, size_t b) { return b != 0 && a > SIZE_MAX / b ? SIZE_MAX : a * b; }
size_t mul(std::initializer_list<int64_t> factors) {
  size_t r = 1;
  for (int64_t f : factors) r = mul(r, static_cast<size_t>(f));
  return r;
}

// ---- one convolution problem, from its descriptors
enum class Op { kForward, kBackwardData, kBackwardFilter };

struct Problem {
  Op op;
  cudnnDataType_t type;  // x, w and y
  cudnnDataType_t compute;
  cudnnMathType_t math;
  cudnnConvolutionMode_t mode;
  int64_t N, C, H, W, K, Cg, Kg, R, S, Ho, Wo, groups;
  int64_t pad_h, pad_w, u, v, dil_h, dil_w;
  const cudnnTensorStruct* x;  // x (forward, backward filter) or dx (backward data)
  const cudnnFilterStruct* w;  // w or dw
  const cudnnTensorStruct* y;  // y or dy
};

// Names of x, w and y in op's arguments.
struct Roles {
  const char *x, *w, *y;
};
Roles roles(Op op) {
  switch (op) {
    case Op::kForward: return {"xDesc", "wDesc", "yDesc"};
    case Op::kBackwardData: return {"dxDesc", "wDesc", "dyDesc"};
    case Op::kBackwardFilter: return {"xDesc", "dwDesc", "dyDesc"};
  }
  return {"x", "w", "y"};
}

std::string dims_text(const int64_t* d) { return concat("[", d[0], ", ", d[1], ", ", d[2], ", ", d[3], "]"); }

// 1 + (in + 2 pad - ((f - 1) dil + 1)) / stride: cudnnGetConvolution2dForwardOutputDim's formula; 0
// when the dilated filter is larger than the padded input.
int64_t output_size(int64_t in, int64_t pad, int64_t f, int64_t dil, int64_t stride) {
  const int64_t span = in + 2 * pad - ((f - 1) * dil + 1);
  return span < 0 ? 0 : 1 + span / stride;
}

cudnnStatus_t check_descriptor(const char* fn, const char* role, const cudnnTensorStruct* t) {
  if (t == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": ", role, " is null"));
  if (!live_tensors().contains(t))
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": ", role, " is not a live tensor descriptor (destroyed?)"));
  if (!t->set)
    return fail(CUDNN_STATUS_BAD_PARAM,
                concat(fn, ": ", role, " was never set (cudnnSetTensor4dDescriptor / cudnnSetTensor4dDescriptorEx)"));
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t check_descriptor(const char* fn, const char* role, const cudnnFilterStruct* f) {
  if (f == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": ", role, " is null"));
  if (!live_filters().contains(f))
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": ", role, " is not a live filter descriptor (destroyed?)"));
  if (!f->set)
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": ", role, " was never set (cudnnSetFilter4dDescriptor)"));
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t check_descriptor(const char* fn, const cudnnConvolutionStruct* c) {
  if (c == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": convDesc is null"));
  if (!live_convs().contains(c))
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": convDesc is not a live convolution descriptor (destroyed?)"));
  if (!c->set)
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": convDesc was never set (cudnnSetConvolution2dDescriptor)"));
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t check_handle(const char* fn, const cudnnContext* h) {
  if (h == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": handle is null"));
  if (!live_handles().contains(h))
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": handle is not a live cuDNN handle (destroyed?)"));
  return CUDNN_STATUS_SUCCESS;
}

// The documented rules relating x, w, the convolution and y (cudnnConvolutionForward,
// cudnnConvolutionBackwardData, cudnnConvolutionBackwardFilter and their _v7 heuristics and workspace
// queries share them), and the configuration table of data and compute types.
cudnnStatus_t make_problem(const char* fn, Op op, const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                           const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y, Problem* p) {
  const Roles r = roles(op);
  if (cudnnStatus_t s = check_descriptor(fn, r.x, x); s != CUDNN_STATUS_SUCCESS) return s;
  if (cudnnStatus_t s = check_descriptor(fn, r.w, w); s != CUDNN_STATUS_SUCCESS) return s;
  if (cudnnStatus_t s = check_descriptor(fn, conv); s != CUDNN_STATUS_SUCCESS) return s;
  if (cudnnStatus_t s = check_descriptor(fn, r.y, y); s != CUDNN_STATUS_SUCCESS) return s;
  if (x->type != w->type || x->type != y->type)
    return fail(CUDNN_STATUS_BAD_PARAM,
                concat(fn, ": ", r.x, ", ", r.w, " and ", r.y, " must have one data type, got ", type_name(x->type),
                       ", ", type_name(w->type), " and ", type_name(y->type)));
  // The configurations of the cuDNN API reference's tables: FLOAT_CONFIG, DOUBLE_CONFIG,
  // PSEUDO_HALF_CONFIG and PSEUDO_BFLOAT16_CONFIG (16-bit data, FLOAT compute type). TRUE_HALF_CONFIG
  // (HALF compute type) is a cuDNN configuration the host does not model.
  const cudnnDataType_t t = x->type, ct = conv->compute;
  const bool config = (t == CUDNN_DATA_FLOAT && ct == CUDNN_DATA_FLOAT) ||
                      (t == CUDNN_DATA_DOUBLE && ct == CUDNN_DATA_DOUBLE) ||
                      ((t == CUDNN_DATA_HALF || t == CUDNN_DATA_BFLOAT16) && ct == CUDNN_DATA_FLOAT);
  if (!config) {
    if (t == CUDNN_DATA_HALF && ct == CUDNN_DATA_HALF)
      return fail(CUDNN_STATUS_NOT_SUPPORTED,
                  concat(fn, ": TRUE_HALF_CONFIG (HALF data, HALF compute type) is not modelled on the host"));
    return fail(CUDNN_STATUS_NOT_SUPPORTED,
                concat(fn, ": ", type_name(t), " data with compute type ", type_name(ct),
                       " is none of cuDNN's configurations (FLOAT/FLOAT, DOUBLE/DOUBLE, HALF/FLOAT, "
                       "BFLOAT16/FLOAT)"));
  }
  if (conv->math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && t == CUDNN_DATA_FLOAT)
    return fail(CUDNN_STATUS_NOT_SUPPORTED,
                concat(fn,
                       ": CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION on FLOAT data (operands converted down to 16 "
                       "bits) is not modelled on the host"));
  const int64_t N = x->dim[0], C = x->dim[1], H = x->dim[2], W = x->dim[3];
  const int64_t K = w->dim[0], Cg = w->dim[1], R = w->dim[2], S = w->dim[3], G = conv->groups;
  if (C != Cg * G)
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": ", r.x, " has ", C, " feature maps but ", r.w, " has ", Cg,
                                               " per group x ", G, " groups = ", Cg * G, " (", r.x, " ",
                                               dims_text(x->dim), ", ", r.w, " ", dims_text(w->dim), ")"));
  if (K % G != 0)
    return fail(CUDNN_STATUS_BAD_PARAM,
                concat(fn, ": ", r.w, "'s ", K, " output feature maps are not a multiple of the group count ", G));
  const int64_t Ho = output_size(H, conv->pad[0], R, conv->dilation[0], conv->stride[0]);
  const int64_t Wo = output_size(W, conv->pad[1], S, conv->dilation[1], conv->stride[1]);
  if (Ho == 0 || Wo == 0)
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": the dilated filter ", (R - 1) * conv->dilation[0] + 1, "x",
                                               (S - 1) * conv->dilation[1] + 1, " is larger than the padded input ",
                                               H + 2 * conv->pad[0], "x", W + 2 * conv->pad[1]));
  if (y->dim[0] != N || y->dim[1] != K || y->dim[2] != Ho || y->dim[3] != Wo)
    return fail(
        CUDNN_STATUS_NOT_SUPPORTED_SHAPE,
        concat(fn, ": ", r.y, " is ", dims_text(y->dim), " but the convolution of ", r.x, " ", dims_text(x->dim),
               " by ", r.w, " ", dims_text(w->dim), " (padding ", conv->pad[0], "x", conv->pad[1], ", stride ",
               conv->stride[0], "x", conv->stride[1], ", dilation ", conv->dilation[0], "x", conv->dilation[1], ", ", G,
               " groups) is [", N, ", ", K, ", ", Ho, ", ", Wo, "] (cudnnGetConvolution2dForwardOutputDim)"));
  for (const cudnnTensorStruct* tensor : {x, y})
    for (int d = 0; d < 4; ++d)
      if (tensor->stride[d] <= 0)
        return fail(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT,
                    concat(fn, ": ", tensor == x ? r.x : r.y, " has a stride <= 0 (", tensor->stride[0], ", ",
                           tensor->stride[1], ", ", tensor->stride[2], ", ", tensor->stride[3], ")"));
  *p = Problem{.op = op,
               .type = t,
               .compute = ct,
               .math = conv->math,
               .mode = conv->mode,
               .N = N,
               .C = C,
               .H = H,
               .W = W,
               .K = K,
               .Cg = Cg,
               .Kg = K / G,
               .R = R,
               .S = S,
               .Ho = Ho,
               .Wo = Wo,
               .groups = G,
               .pad_h = conv->pad[0],
               .pad_w = conv->pad[1],
               .u = conv->stride[0],
               .v = conv->stride[1],
               .dil_h = conv->dilation[0],
               .dil_w = conv->dilation[1],
               .x = x,
               .w = w,
               .y = y};
  return CUDNN_STATUS_SUCCESS;
}

// ---- the algorithms: which ones run a problem (the cuDNN API reference's per-algorithm support
// tables, as far as they concern NCHW 2-D convolutions), their determinism and workspace.
struct AlgoInfo {
  bool supported;
  const char* why_not;  // when not supported
  bool deterministic;
  size_t workspace;
};

bool unit_geometry(const Problem& p) { return p.u == 1 && p.v == 1 && p.dil_h == 1 && p.dil_w == 1 && p.groups == 1; }
bool fp32_or_half(const Problem& p) { return p.type == CUDNN_DATA_FLOAT || p.type == CUDNN_DATA_HALF; }
size_t compute_bytes(const Problem& p) { return p.compute == CUDNN_DATA_DOUBLE ? 8 : 4; }

// The transform-based algorithms' conditions (the same in all three directions).
AlgoInfo fft(const Problem& p, size_t bytes) {
  if (!unit_geometry(p)) return {false, "FFT needs stride 1, dilation 1 and one group", true, 0};
  if (!fp32_or_half(p)) return {false, "FFT needs FLOAT or HALF data", true, 0};
  if (p.H + 2 * p.pad_h > 256 || p.W + 2 * p.pad_w > 256)
    return {false, "FFT needs a padded input of at most 256x256", true, 0};
  if (p.R <= p.pad_h || p.S <= p.pad_w) return {false, "FFT needs a filter larger than the padding", true, 0};
  return {true, "", true, bytes};
}
AlgoInfo fft_tiling(const Problem& p, size_t bytes) {
  if (!unit_geometry(p)) return {false, "FFT_TILING needs stride 1, dilation 1 and one group", true, 0};
  if (p.type == CUDNN_DATA_BFLOAT16) return {false, "FFT_TILING needs FLOAT, HALF or DOUBLE data", true, 0};
  if (p.R > 32 || p.S > 32) return {false, "FFT_TILING needs a filter of at most 32x32", true, 0};
  if (p.R <= p.pad_h || p.S <= p.pad_w) return {false, "FFT_TILING needs a filter larger than the padding", true, 0};
  return {true, "", true, bytes};
}
AlgoInfo winograd(const Problem& p, bool nonfused, size_t bytes) {
  if (!unit_geometry(p)) return {false, "WINOGRAD needs stride 1, dilation 1 and one group", true, 0};
  if (!fp32_or_half(p)) return {false, "WINOGRAD needs FLOAT or HALF data", true, 0};
  const bool shape = (p.R == 3 && p.S == 3) || (nonfused && p.R == 5 && p.S == 5);
  if (!shape)
    return {false, nonfused ? "WINOGRAD_NONFUSED needs a 3x3 or 5x5 filter" : "WINOGRAD needs a 3x3 filter", true, 0};
  return {true, "", true, bytes};
}

// Workspace sizes: an image's column matrix for the GEMM-based algorithms, fp32 (fp64) accumulators
// for a 16-bit weight gradient, the transformed operands of the FFT and Winograd ones. The
// precomputed-index table of IMPLICIT_PRECOMP_GEMM is padded for tensor-core tiles under
// CUDNN_TENSOR_OP_MATH, so its size depends on the math type.
size_t columns_bytes(const Problem& p) {
  return mul({p.Cg, p.R, p.S, p.Ho, p.Wo, static_cast<int64_t>(element_bytes(p.type))});
}
size_t transform_bytes(const Problem& p, int64_t tile) {
  const int64_t hp = p.H + 2 * p.pad_h, wp = p.W + 2 * p.pad_w;
  return mul({2 * static_cast<int64_t>(compute_bytes(p)), p.N * p.C + p.K * p.Cg + p.N * p.K,
              tile > 0 ? tile * tile : hp * wp});
}

AlgoInfo forward_algo(const Problem& p, cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return {true, "", true, 0};
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: {
      const int64_t entries = p.Cg * p.R * p.S,
                    padded = p.math == CUDNN_TENSOR_OP_MATH ? (entries + 31) / 32 * 32 : entries;
      return {true, "", true, mul({padded, 2 * static_cast<int64_t>(sizeof(int))})};
    }
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return {true, "", true, columns_bytes(p)};
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return {false, "DIRECT is not implemented by cuDNN", true, 0};
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return fft(p, transform_bytes(p, 0));
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return fft_tiling(p, transform_bytes(p, 32));
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return winograd(p, false, 0);
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return winograd(p, true, transform_bytes(p, 6));
    default: break;
  }
  return {false, "not a cudnnConvolutionFwdAlgo_t", true, 0};
}
AlgoInfo backward_data_algo(const Problem& p, cudnnConvolutionBwdDataAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: return {true, "", false, 0};  // atomics: non-deterministic
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: return {true, "", true, columns_bytes(p)};
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: return fft(p, transform_bytes(p, 0));
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING: return fft_tiling(p, transform_bytes(p, 32));
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD: return winograd(p, false, 0);
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED: return winograd(p, true, transform_bytes(p, 6));
    default: break;
  }
  return {false, "not a cudnnConvolutionBwdDataAlgo_t", true, 0};
}
AlgoInfo backward_filter_algo(const Problem& p, cudnnConvolutionBwdFilterAlgo_t a) {
  const size_t accumulators =
      element_bytes(p.type) < compute_bytes(p) ? mul({p.K, p.Cg, p.R, p.S, static_cast<int64_t>(compute_bytes(p))}) : 0;
  switch (a) {
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0: return {true, "", false, 0};  // atomics
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1: return {true, "", true, accumulators};
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT: return fft(p, transform_bytes(p, 0));
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3: return {true, "", false, columns_bytes(p)};  // atomics
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD: return {false, "WINOGRAD is not implemented by cuDNN", true, 0};
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED: return winograd(p, true, transform_bytes(p, 6));
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING: return fft_tiling(p, transform_bytes(p, 32));
    default: break;
  }
  return {false, "not a cudnnConvolutionBwdFilterAlgo_t", true, 0};
}

// The math type a heuristic entry reports: the descriptor's, except that the FFT-based algorithms do
// not run on tensor cores.
cudnnMathType_t entry_math(const Problem& p, bool fft_based) {
  if (fft_based && (p.math == CUDNN_TENSOR_OP_MATH || p.math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
    return CUDNN_DEFAULT_MATH;
  return p.math;
}

// The heuristic's list for a direction: every algorithm, the ones that run the problem first in the
// order given (cuDNN's own order is its speed estimate), then the others with CUDNN_STATUS_NOT_SUPPORTED.
template <typename Perf, typename Algo, typename Info>
int fill_heuristic(const Problem& p, std::initializer_list<Algo> order, int count, Info info,
                   std::initializer_list<Algo> fft_based, int requested, Perf* results) {
  std::vector<Perf> list;
  // `order` first, then the remaining enumerants in value order.
  std::vector<Algo> all(order);
  for (int i = 0; i < count; ++i)
    if (std::find(all.begin(), all.end(), static_cast<Algo>(i)) == all.end()) all.push_back(static_cast<Algo>(i));
  for (bool supported : {true, false}) {
    for (Algo a : all) {
      const AlgoInfo ai = info(p, a);
      if (ai.supported != supported) continue;
      Perf e{};
      e.algo = a;
      e.status = supported ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
      e.time = -1.0f;
      e.memory = supported ? ai.workspace : 0;
      e.determinism = ai.deterministic ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
      e.mathType = entry_math(p, std::find(fft_based.begin(), fft_based.end(), a) != fft_based.end());
      list.push_back(e);
    }
  }
  const int n = std::min(requested, static_cast<int>(list.size()));
  for (int i = 0; i < n; ++i) results[i] = list[i];
  return n;
}

// ---- the reference convolution
// A tensor's or filter's logical [d0, d1, d2, d3] with element strides.
struct Layout {
  int64_t dim[4];
  int64_t stride[4];
  int64_t offset(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return a * stride[0] + b * stride[1] + c * stride[2] + d * stride[3];
  }
  int64_t count() const { return dim[0] * dim[1] * dim[2] * dim[3]; }
  // One past the largest element offset.
  int64_t extent() const {
    int64_t e = 1;
    for (int i = 0; i < 4; ++i) e += (dim[i] - 1) * stride[i];
    return e;
  }
};
Layout layout_of(const cudnnTensorStruct& t) {
  return {{t.dim[0], t.dim[1], t.dim[2], t.dim[3]}, {t.stride[0], t.stride[1], t.stride[2], t.stride[3]}};
}
Layout layout_of(const cudnnFilterStruct& f) {
  return {{f.dim[0], f.dim[1], f.dim[2], f.dim[3]}, {f.dim[1] * f.dim[2] * f.dim[3], f.dim[2] * f.dim[3], f.dim[3], 1}};
}

// Whether two elements of l share an address (strides sorted, each must pass the extent of the
// dimensions below it).
bool self_overlapping(const Layout& l) {
  int order[4] = {0, 1, 2, 3};
  std::sort(order, order + 4, [&](int a, int b) { return l.stride[a] < l.stride[b]; });
  int64_t covered = 0;  // the largest offset reachable with the dimensions so far
  for (int i : order) {
    if (l.dim[i] == 1) continue;
    if (l.stride[i] <= covered) return true;
    covered += (l.dim[i] - 1) * l.stride[i];
  }
  return false;
}

// Exact widening of a stored element into the accumulation type, and one rounding back.
template <typename Acc>
Acc load(cudnnDataType_t t, const void* base, int64_t i) {
  switch (t) {
    case CUDNN_DATA_FLOAT: return static_cast<Acc>(static_cast<const float*>(base)[i]);
    case CUDNN_DATA_DOUBLE: return static_cast<Acc>(static_cast<const double*>(base)[i]);
    case CUDNN_DATA_HALF:
      return static_cast<Acc>(static_cast<float>(mixtrain::float16::from_bits(static_cast<const uint16_t*>(base)[i])));
    case CUDNN_DATA_BFLOAT16:
      return static_cast<Acc>(static_cast<float>(mixtrain::bfloat16::from_bits(static_cast<const uint16_t*>(base)[i])));
    default: break;
  }
  return Acc{};
}
template <typename Acc>
void store(cudnnDataType_t t, void* base, int64_t i, Acc v) {
  switch (t) {
    case CUDNN_DATA_FLOAT: static_cast<float*>(base)[i] = static_cast<float>(v); return;
    case CUDNN_DATA_DOUBLE: static_cast<double*>(base)[i] = static_cast<double>(v); return;
    case CUDNN_DATA_HALF: static_cast<uint16_t*>(base)[i] = mixtrain::float16(static_cast<float>(v)).bits(); return;
    case CUDNN_DATA_BFLOAT16:
      static_cast<uint16_t*>(base)[i] = mixtrain::bfloat16(static_cast<float>(v)).bits();
      return;
    default: return;
  }
}

// The values of a strided operand, widened, packed in logical order.
template <typename Acc>
std::vector<Acc> gather(const Layout& l, cudnnDataType_t t, const void* base) {
  std::vector<Acc> out(static_cast<size_t>(l.count()));
  size_t i = 0;
  for (int64_t a = 0; a < l.dim[0]; ++a)
    for (int64_t b = 0; b < l.dim[1]; ++b)
      for (int64_t c = 0; c < l.dim[2]; ++c)
        for (int64_t d = 0; d < l.dim[3]; ++d) out[i++] = load<Acc>(t, base, l.offset(a, b, c, d));
  return out;
}

// out = alpha * result + beta * out, in the compute type, rounded once; with beta == 0 the prior
// output is not read (cuDNN's scaling-parameter rule: it may hold anything, NaN included).
template <typename Acc>
void blend(const Layout& l, cudnnDataType_t t, void* base, const std::vector<Acc>& result, Acc alpha, Acc beta) {
  size_t i = 0;
  for (int64_t a = 0; a < l.dim[0]; ++a)
    for (int64_t b = 0; b < l.dim[1]; ++b)
      for (int64_t c = 0; c < l.dim[2]; ++c)
        for (int64_t d = 0; d < l.dim[3]; ++d) {
          const int64_t o = l.offset(a, b, c, d);
          Acc v = alpha * result[i++];
          if (beta != Acc{0}) v = v + beta * load<Acc>(t, base, o);
          store<Acc>(t, base, o, v);
        }
}

// The filter tap used at spatial position (r, s) of the window: cross-correlation reads w[r][s],
// convolution the flipped w[R-1-r][S-1-s].
int64_t tap(const Problem& p, int64_t r, int64_t s) {
  return p.mode == CUDNN_CONVOLUTION ? (p.R - 1 - r) * p.S + (p.S - 1 - s) : r * p.S + s;
}

// y[n][k][oh][ow] = sum over c of k's group, r, s (in that order) of x[n][c][ih][iw] * w[k][c][r][s],
// ih = oh u - pad_h + r dil_h; packed in, packed out.
template <typename Acc>
std::vector<Acc> forward(const Problem& p, const std::vector<Acc>& x, const std::vector<Acc>& w) {
  std::vector<Acc> y(static_cast<size_t>(p.N * p.K * p.Ho * p.Wo));
  size_t i = 0;
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t k = 0; k < p.K; ++k) {
      const int64_t c0 = k / p.Kg * p.Cg;
      for (int64_t oh = 0; oh < p.Ho; ++oh)
        for (int64_t ow = 0; ow < p.Wo; ++ow) {
          Acc acc{0};
          for (int64_t c = 0; c < p.Cg; ++c)
            for (int64_t r = 0; r < p.R; ++r) {
              const int64_t ih = oh * p.u - p.pad_h + r * p.dil_h;
              if (ih < 0 || ih >= p.H) continue;
              for (int64_t s = 0; s < p.S; ++s) {
                const int64_t iw = ow * p.v - p.pad_w + s * p.dil_w;
                if (iw < 0 || iw >= p.W) continue;
                acc =
                    acc + x[((n * p.C + c0 + c) * p.H + ih) * p.W + iw] * w[(k * p.Cg + c) * p.R * p.S + tap(p, r, s)];
              }
            }
          y[i++] = acc;
        }
    }
  return y;
}

// dx[n][c][ih][iw] = sum over k of c's group, r, s of dy[n][k][oh][ow] * w[k][c][r][s] for the (oh, ow)
// that read (ih, iw) through tap (r, s).
template <typename Acc>
std::vector<Acc> backward_data(const Problem& p, const std::vector<Acc>& dy, const std::vector<Acc>& w) {
  std::vector<Acc> dx(static_cast<size_t>(p.N * p.C * p.H * p.W));
  size_t i = 0;
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t c = 0; c < p.C; ++c) {
      const int64_t g = c / p.Cg, cl = c % p.Cg;
      for (int64_t ih = 0; ih < p.H; ++ih)
        for (int64_t iw = 0; iw < p.W; ++iw) {
          Acc acc{0};
          for (int64_t k = g * p.Kg; k < (g + 1) * p.Kg; ++k)
            for (int64_t r = 0; r < p.R; ++r) {
              const int64_t th = ih + p.pad_h - r * p.dil_h;
              if (th < 0 || th % p.u != 0 || th / p.u >= p.Ho) continue;
              const int64_t oh = th / p.u;
              for (int64_t s = 0; s < p.S; ++s) {
                const int64_t tw = iw + p.pad_w - s * p.dil_w;
                if (tw < 0 || tw % p.v != 0 || tw / p.v >= p.Wo) continue;
                const int64_t ow = tw / p.v;
                acc = acc + dy[((n * p.K + k) * p.Ho + oh) * p.Wo + ow] * w[(k * p.Cg + cl) * p.R * p.S + tap(p, r, s)];
              }
            }
          dx[i++] = acc;
        }
    }
  return dx;
}

// dw[k][c][tap(r, s)] = sum over n, oh, ow (in that order) of x[n][c of k's group][ih][iw] *
// dy[n][k][oh][ow]: one fp32 (fp64) sum of N Ho Wo products per weight.
template <typename Acc>
std::vector<Acc> backward_filter(const Problem& p, const std::vector<Acc>& x, const std::vector<Acc>& dy) {
  std::vector<Acc> dw(static_cast<size_t>(p.K * p.Cg * p.R * p.S));
  for (int64_t k = 0; k < p.K; ++k) {
    const int64_t c0 = k / p.Kg * p.Cg;
    for (int64_t c = 0; c < p.Cg; ++c)
      for (int64_t r = 0; r < p.R; ++r)
        for (int64_t s = 0; s < p.S; ++s) {
          Acc acc{0};
          for (int64_t n = 0; n < p.N; ++n)
            for (int64_t oh = 0; oh < p.Ho; ++oh) {
              const int64_t ih = oh * p.u - p.pad_h + r * p.dil_h;
              if (ih < 0 || ih >= p.H) continue;
              for (int64_t ow = 0; ow < p.Wo; ++ow) {
                const int64_t iw = ow * p.v - p.pad_w + s * p.dil_w;
                if (iw < 0 || iw >= p.W) continue;
                acc = acc + x[((n * p.C + c0 + c) * p.H + ih) * p.W + iw] * dy[((n * p.K + k) * p.Ho + oh) * p.Wo + ow];
              }
            }
          dw[(k * p.Cg + c) * p.R * p.S + tap(p, r, s)] = acc;
        }
  }
  return dw;
}

template <typename Acc>
void execute(const Problem& p, const void* alpha, const void* beta, const void* x, const void* w, const void* y,
             void* out) {
  const Acc a = *static_cast<const Acc*>(alpha), b = *static_cast<const Acc*>(beta);
  const Layout lx = layout_of(*p.x), lw = layout_of(*p.w), ly = layout_of(*p.y);
  switch (p.op) {
    case Op::kForward:
      blend<Acc>(ly, p.type, out, forward<Acc>(p, gather<Acc>(lx, p.type, x), gather<Acc>(lw, p.type, w)), a, b);
      return;
    case Op::kBackwardData:
      blend<Acc>(lx, p.type, out, backward_data<Acc>(p, gather<Acc>(ly, p.type, y), gather<Acc>(lw, p.type, w)), a, b);
      return;
    case Op::kBackwardFilter:
      blend<Acc>(lw, p.type, out, backward_filter<Acc>(p, gather<Acc>(lx, p.type, x), gather<Acc>(ly, p.type, y)), a,
                 b);
      return;
  }
}

// Claims a handle for one call: cuDNN handles must not be used by two host threads at once.
class HandleUse {
 public:
  explicit HandleUse(cudnnContext* h) : h_(h), claimed_(!h->busy.exchange(true)) {}
  ~HandleUse() {
    if (claimed_) h_->busy.store(false);
  }
  HandleUse(const HandleUse&) = delete;
  HandleUse& operator=(const HandleUse&) = delete;
  bool claimed() const { return claimed_; }

 private:
  cudnnContext* h_;
  bool claimed_;
};

// What a call that runs work checks of the handle beyond check_handle: the device it was made on is
// current and its stream is still alive.
cudnnStatus_t check_running_handle(const char* fn, cudnnContext* h) {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess || device != h->device)
    return fail(CUDNN_STATUS_BAD_PARAM,
                concat(fn, ": the handle belongs to device ", h->device, " but device ", device, " is current"));
  if (cudaStreamSynchronize(h->stream) != cudaSuccess)
    return fail(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH,
                concat(fn, ": the handle's stream (cudnnSetStream) is no longer a live stream"));
  return CUDNN_STATUS_SUCCESS;
}

const char* workspace_query(Op op) {
  switch (op) {
    case Op::kForward: return "cudnnGetConvolutionForwardWorkspaceSize";
    case Op::kBackwardData: return "cudnnGetConvolutionBackwardDataWorkspaceSize";
    case Op::kBackwardFilter: return "cudnnGetConvolutionBackwardFilterWorkspaceSize";
  }
  return "";
}

struct RunArgs {
  const char* fn;
  Op op;
  cudnnHandle_t handle;
  const void *alpha, *beta;
  const cudnnTensorStruct* xd;
  const void* x;
  const cudnnFilterStruct* wd;
  const void* w;
  const cudnnConvolutionStruct* conv;
  const cudnnTensorStruct* yd;
  const void* y;
  void* workspace;
  size_t workspace_bytes;
};

// One convolution call: the rules of make_problem, then the pointers, the algorithm, the workspace
// and the output's layout; then the reference computation into the output (y, dx or dw).
template <typename Algo, typename InfoFn>
cudnnStatus_t run(const RunArgs& a, Algo algo, InfoFn info) {
  const char* fn = a.fn;
  if (cudnnStatus_t s = check_handle(fn, a.handle); s != CUDNN_STATUS_SUCCESS) return s;
  const HandleUse use(a.handle);
  if (!use.claimed())
    return fail(CUDNN_STATUS_BAD_PARAM,
                concat(fn, ": the handle is in use by another host thread (a handle serves one thread at a time)"));
  if (cudnnStatus_t s = check_running_handle(fn, a.handle); s != CUDNN_STATUS_SUCCESS) return s;
  Problem p;
  if (cudnnStatus_t s = make_problem(fn, a.op, a.xd, a.wd, a.conv, a.yd, &p); s != CUDNN_STATUS_SUCCESS) return s;
  const Roles r = roles(a.op);
  // The data pointers, named as the API names them; the output last.
  struct Operand {
    const char* name;
    const void* ptr;
    Layout layout;
  };
  const char* xn = a.op == Op::kBackwardData ? "dx" : "x";
  const char* wn = a.op == Op::kBackwardFilter ? "dw" : "w";
  const char* yn = a.op == Op::kForward ? "y" : "dy";
  Operand ops[3] = {{xn, a.x, layout_of(*a.xd)}, {wn, a.w, layout_of(*a.wd)}, {yn, a.y, layout_of(*a.yd)}};
  const int out = a.op == Op::kForward ? 2 : a.op == Op::kBackwardData ? 0 : 1;
  // The scaling factors live in host memory (cuDNN's default pointer mode), the data and the
  // workspace in device memory: the other way round, a GPU faults.
  if (a.alpha == nullptr || a.beta == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": alpha or beta is null"));
  if (is_device_address(a.alpha) || is_device_address(a.beta))
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": alpha and beta must point to host memory, not device memory"));
  const size_t elem = element_bytes(p.type);
  for (const Operand& o : ops) {
    if (o.ptr == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": ", o.name, " is null"));
    if (!is_device_address(o.ptr))
      return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": ", o.name, " is not device memory (cudaMalloc)"));
    if (reinterpret_cast<uintptr_t>(o.ptr) % elem != 0)
      return fail(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER,
                  concat(fn, ": ", o.name, " is not aligned to its ", elem, "-byte elements"));
  }
  // No operand may share memory with the output (cuDNN's convolutions are not in place), nor may two
  // of the output's elements.
  auto range_of = [&](const Operand& o) {
    const auto begin = reinterpret_cast<uintptr_t>(o.ptr);
    return std::pair<uintptr_t, uintptr_t>{begin, begin + static_cast<uintptr_t>(o.layout.extent()) * elem};
  };
  const auto [ob, oe] = range_of(ops[out]);
  for (int i = 0; i < 3; ++i) {
    if (i == out) continue;
    const auto [b, e] = range_of(ops[i]);
    if (b < oe && ob < e)
      return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": the output ", ops[out].name, " overlaps the input ",
                                                 ops[i].name, " (the convolution is not in place)"));
  }
  const char* out_role = out == 0 ? r.x : out == 1 ? r.w : r.y;
  if (self_overlapping(ops[out].layout))
    return fail(CUDNN_STATUS_BAD_PARAM,
                concat(fn, ": the strides of the output ", out_role, " make two of its elements share an address"));
  if (std::string_view(algo_name(algo)) == "?")
    return fail(CUDNN_STATUS_BAD_PARAM,
                concat(fn, ": algo ", static_cast<int>(algo), " is not an algorithm enumerant"));
  const AlgoInfo ai = info(p, algo);
  if (!ai.supported)
    return fail(CUDNN_STATUS_NOT_SUPPORTED,
                concat(fn, ": algo ", algo_name(algo), " does not support this convolution: ", ai.why_not));
  if (a.workspace_bytes < ai.workspace)
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": workSpaceSizeInBytes ", a.workspace_bytes, " is less than the ",
                                               ai.workspace, " bytes algo ", algo_name(algo), " needs with ",
                                               math_name(p.math), " (", workspace_query(a.op), ")"));
  if (a.workspace_bytes > 0 && a.workspace == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM,
                concat(fn, ": workSpace is null but workSpaceSizeInBytes is ", a.workspace_bytes));
  if (a.workspace_bytes > 0 && !is_device_address(a.workspace))
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": workSpace is not device memory (cudaMalloc)"));
  const mixtrain::cuda_host::DeviceAccess access;  // the library reads and writes device memory
  // The algorithm owns its workspace during the call: every byte the caller promised is written (an
  // allocation shorter than the promise is an overflow AddressSanitizer reports).
  if (a.workspace_bytes > 0) std::memset(a.workspace, 0xa5, a.workspace_bytes);
  void* out_ptr = const_cast<void*>(ops[out].ptr);
  if (p.compute == CUDNN_DATA_DOUBLE)
    execute<double>(p, a.alpha, a.beta, a.x, a.w, a.y, out_ptr);
  else
    execute<float>(p, a.alpha, a.beta, a.x, a.w, a.y, out_ptr);
  return CUDNN_STATUS_SUCCESS;
}

// The checks shared by the _v7 heuristics and the workspace queries.
cudnnStatus_t query_problem(const char* fn, Op op, cudnnHandle_t handle, const cudnnTensorStruct* x,
                            const cudnnFilterStruct* w, const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y,
                            Problem* p) {
  if (cudnnStatus_t s = check_handle(fn, handle); s != CUDNN_STATUS_SUCCESS) return s;
  return make_problem(fn, op, x, w, conv, y, p);
}

}  // namespace

// ---- cudnn_graph
size_t cudnnGetVersion() { return CUDNN_VERSION; }

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_INVALID_VALUE: return "CUDNN_STATUS_INVALID_VALUE";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER: return "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER";
    case CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED: return "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED";
    case CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND: return "CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND";
    case CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT: return "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT";
    case CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH: return "CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH";
    case CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH: return "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_NOT_SUPPORTED_SHAPE: return "CUDNN_STATUS_NOT_SUPPORTED_SHAPE";
    case CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE: return "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE";
    case CUDNN_STATUS_NOT_SUPPORTED_LAYOUT: return "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED:
      return "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
  }
  return "CUDNN_STATUS_UNKNOWN (not a cudnnStatus_t value)";
}

void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (message == nullptr || max_size == 0) return;
  const size_t n = std::min(g_last_error.size(), max_size - 1);
  std::memcpy(message, g_last_error.data(), n);
  message[n] = '\0';
  g_last_error.clear();
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnCreate: handle is null");
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess)
    return fail(CUDNN_STATUS_NOT_INITIALIZED, "cudnnCreate: no current CUDA device");
  auto* h = new cudnnContext;
  h->device = device;
  live_handles().add(h);
  *handle = h;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  if (handle == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy: handle is null");
  if (!live_handles().remove(handle))
    return fail(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy: not a live cuDNN handle (destroyed twice?)");
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (cudnnStatus_t s = check_handle("cudnnSetStream", handle); s != CUDNN_STATUS_SUCCESS) return s;
  if (cudaStreamSynchronize(stream) != cudaSuccess)
    return fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: streamId is not a live CUDA stream");
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  if (cudnnStatus_t s = check_handle("cudnnGetStream", handle); s != CUDNN_STATUS_SUCCESS) return s;
  if (stream == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetStream: streamId is null");
  *stream = handle->stream;
  return CUDNN_STATUS_SUCCESS;
}

// ---- descriptors
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* desc) {
  if (desc == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnCreateTensorDescriptor: tensorDesc is null");
  *desc = new cudnnTensorStruct;
  live_tensors().add(*desc);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc) {
  if (desc == nullptr) return CUDNN_STATUS_SUCCESS;  // cuDNN: destroying NULL is a no-op
  if (!live_tensors().remove(desc))
    return fail(CUDNN_STATUS_BAD_PARAM,
                "cudnnDestroyTensorDescriptor: not a live tensor descriptor (destroyed twice?)");
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}

namespace {
cudnnStatus_t set_tensor(const char* fn, cudnnTensorDescriptor_t desc, cudnnDataType_t type, const int64_t dim[4],
                         const int64_t stride[4]) {
  if (desc == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": tensorDesc is null"));
  if (!live_tensors().contains(desc))
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": tensorDesc is not a live tensor descriptor (destroyed?)"));
  if (cudnnStatus_t s = check_type(fn, "dataType", type); s != CUDNN_STATUS_SUCCESS) return s;
  if (dim[0] <= 0 || dim[1] <= 0 || dim[2] <= 0 || dim[3] <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": n, c, h and w must be positive, got ", dims_text(dim)));
  const Layout l{{dim[0], dim[1], dim[2], dim[3]}, {stride[0], stride[1], stride[2], stride[3]}};
  if (!within_int(l.count()))
    return fail(CUDNN_STATUS_NOT_SUPPORTED,
                concat(fn, ": ", dims_text(dim), " has ", l.count(), " elements, more than cuDNN's 2^31 - 1"));
  *desc = cudnnTensorStruct{true, type, {dim[0], dim[1], dim[2], dim[3]}, {stride[0], stride[1], stride[2], stride[3]}};
  return CUDNN_STATUS_SUCCESS;
}
}  // namespace

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t desc, cudnnTensorFormat_t format, cudnnDataType_t type,
                                         int n, int c, int h, int w) {
  const char* fn = "cudnnSetTensor4dDescriptor";
  const int64_t dim[4] = {n, c, h, w};
  int64_t stride[4];
  switch (format) {
    case CUDNN_TENSOR_NCHW:
      stride[3] = 1, stride[2] = w, stride[1] = int64_t{h} * w, stride[0] = int64_t{c} * h * w;
      break;
    case CUDNN_TENSOR_NHWC:
      stride[1] = 1, stride[3] = c, stride[2] = int64_t{w} * c, stride[0] = int64_t{h} * w * c;
      break;
    case CUDNN_TENSOR_NCHW_VECT_C:
      return fail(CUDNN_STATUS_BAD_PARAM,
                  concat(fn, ": CUDNN_TENSOR_NCHW_VECT_C needs a vectorised data type (INT8x4, INT8x32), not ",
                         type_name(type) != nullptr ? type_name(type) : "this one"));
    default:
      return fail(CUDNN_STATUS_BAD_PARAM,
                  concat(fn, ": format ", static_cast<int>(format), " is not a cudnnTensorFormat_t"));
  }
  return set_tensor(fn, desc, type, dim, stride);
}
cudnnStatus_t cudnnSetTensor4dDescriptorEx(cudnnTensorDescriptor_t desc, cudnnDataType_t type, int n, int c, int h,
                                           int w, int n_stride, int c_stride, int h_stride, int w_stride) {
  const int64_t dim[4] = {n, c, h, w}, stride[4] = {n_stride, c_stride, h_stride, w_stride};
  return set_tensor("cudnnSetTensor4dDescriptorEx", desc, type, dim, stride);
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* desc) {
  if (desc == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnCreateFilterDescriptor: filterDesc is null");
  *desc = new cudnnFilterStruct;
  live_filters().add(*desc);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc) {
  if (desc == nullptr) return CUDNN_STATUS_SUCCESS;
  if (!live_filters().remove(desc))
    return fail(CUDNN_STATUS_BAD_PARAM,
                "cudnnDestroyFilterDescriptor: not a live filter descriptor (destroyed twice?)");
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t desc, cudnnDataType_t type, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
  const char* fn = "cudnnSetFilter4dDescriptor";
  if (desc == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": filterDesc is null"));
  if (!live_filters().contains(desc))
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": filterDesc is not a live filter descriptor (destroyed?)"));
  if (cudnnStatus_t s = check_type(fn, "dataType", type); s != CUDNN_STATUS_SUCCESS) return s;
  switch (format) {
    case CUDNN_TENSOR_NCHW: break;
    case CUDNN_TENSOR_NHWC:
      return fail(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT,
                  concat(fn,
                         ": KRSC filters (CUDNN_TENSOR_NHWC) are not modelled on the host (KCRS, "
                         "CUDNN_TENSOR_NCHW, is)"));
    case CUDNN_TENSOR_NCHW_VECT_C:
      return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": CUDNN_TENSOR_NCHW_VECT_C needs a vectorised data type"));
    default:
      return fail(CUDNN_STATUS_BAD_PARAM,
                  concat(fn, ": format ", static_cast<int>(format), " is not a cudnnTensorFormat_t"));
  }
  const int64_t dim[4] = {k, c, h, w};
  if (k <= 0 || c <= 0 || h <= 0 || w <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": k, c, h and w must be positive, got ", dims_text(dim)));
  if (!within_int(int64_t{k} * c * h * w))
    return fail(CUDNN_STATUS_NOT_SUPPORTED, concat(fn, ": ", dims_text(dim), " has more than 2^31 - 1 elements"));
  *desc = cudnnFilterStruct{true, type, {k, c, h, w}};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* desc) {
  if (desc == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnCreateConvolutionDescriptor: convDesc is null");
  *desc = new cudnnConvolutionStruct;
  live_convs().add(*desc);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t desc) {
  if (desc == nullptr) return CUDNN_STATUS_SUCCESS;
  if (!live_convs().remove(desc))
    return fail(CUDNN_STATUS_BAD_PARAM,
                "cudnnDestroyConvolutionDescriptor: not a live convolution descriptor (destroyed twice?)");
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t desc, int pad_h, int pad_w, int u, int v,
                                              int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute_type) {
  const char* fn = "cudnnSetConvolution2dDescriptor";
  if (desc == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": convDesc is null"));
  if (!live_convs().contains(desc))
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": convDesc is not a live convolution descriptor (destroyed?)"));
  if (pad_h < 0 || pad_w < 0)
    return fail(CUDNN_STATUS_BAD_PARAM,
                concat(fn, ": the zero-padding pad_h ", pad_h, ", pad_w ", pad_w, " must be >= 0"));
  if (u <= 0 || v <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM,
                concat(fn, ": the filter strides u ", u, " (vertical), v ", v, " (horizontal) must be > 0"));
  if (dilation_h <= 0 || dilation_w <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM,
                concat(fn, ": the dilations dilation_h ", dilation_h, ", dilation_w ", dilation_w, " must be > 0"));
  if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION)
    return fail(CUDNN_STATUS_BAD_PARAM,
                concat(fn, ": mode ", static_cast<int>(mode), " is not a cudnnConvolutionMode_t"));
  if (type_name(compute_type) == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM,
                concat(fn, ": computeType ", static_cast<int>(compute_type), " is not a cudnnDataType_t"));
  desc->set = true;
  desc->pad[0] = pad_h, desc->pad[1] = pad_w;
  desc->stride[0] = u, desc->stride[1] = v;
  desc->dilation[0] = dilation_h, desc->dilation[1] = dilation_w;
  desc->mode = mode;
  desc->compute = compute_type;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t desc, int group_count) {
  const char* fn = "cudnnSetConvolutionGroupCount";
  if (desc == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": convDesc is null"));
  if (!live_convs().contains(desc))
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": convDesc is not a live convolution descriptor (destroyed?)"));
  if (group_count < 1) return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": groupCount ", group_count, " must be >= 1"));
  desc->groups = group_count;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t desc, cudnnMathType_t math_type) {
  const char* fn = "cudnnSetConvolutionMathType";
  if (desc == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": convDesc is null"));
  if (!live_convs().contains(desc))
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": convDesc is not a live convolution descriptor (destroyed?)"));
  if (math_name(math_type) == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM,
                concat(fn, ": mathType ", static_cast<int>(math_type), " is not a cudnnMathType_t"));
  desc->math = math_type;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t x,
                                                    cudnnFilterDescriptor_t w, int* n, int* c, int* h, int* wo) {
  const char* fn = "cudnnGetConvolution2dForwardOutputDim";
  if (cudnnStatus_t s = check_descriptor(fn, conv); s != CUDNN_STATUS_SUCCESS) return s;
  if (cudnnStatus_t s = check_descriptor(fn, "inputTensorDesc", x); s != CUDNN_STATUS_SUCCESS) return s;
  if (cudnnStatus_t s = check_descriptor(fn, "filterDesc", w); s != CUDNN_STATUS_SUCCESS) return s;
  if (n == nullptr || c == nullptr || h == nullptr || wo == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": an output pointer (n, c, h, w) is null"));
  if (x->dim[1] != w->dim[1] * conv->groups)
    return fail(CUDNN_STATUS_BAD_PARAM,
                concat(fn, ": inputTensorDesc has ", x->dim[1], " feature maps but filterDesc has ", w->dim[1],
                       " per group x ", conv->groups, " groups"));
  const int64_t ho = output_size(x->dim[2], conv->pad[0], w->dim[2], conv->dilation[0], conv->stride[0]);
  const int64_t wout = output_size(x->dim[3], conv->pad[1], w->dim[3], conv->dilation[1], conv->stride[1]);
  if (ho == 0 || wout == 0)
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": the dilated filter is larger than the padded input"));
  *n = static_cast<int>(x->dim[0]);
  *c = static_cast<int>(w->dim[0]);
  *h = static_cast<int>(ho);
  *wo = static_cast<int>(wout);
  return CUDNN_STATUS_SUCCESS;
}

// ---- algorithm counts, heuristics and workspace sizes
namespace {
cudnnStatus_t max_count(const char* fn, cudnnHandle_t handle, int* count, int value) {
  if (cudnnStatus_t s = check_handle(fn, handle); s != CUDNN_STATUS_SUCCESS) return s;
  if (count == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": count is null"));
  *count = value;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t check_heuristic_args(const char* fn, int requested, const int* returned, const void* results) {
  if (returned == nullptr || results == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": returnedAlgoCount or perfResults is null"));
  if (requested <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": requestedAlgoCount ", requested, " must be > 0"));
  return CUDNN_STATUS_SUCCESS;
}
template <typename Algo>
cudnnStatus_t workspace(const char* fn, const AlgoInfo& ai, Algo algo, size_t* bytes) {
  if (bytes == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, concat(fn, ": sizeInBytes is null"));
  if (std::string_view(algo_name(algo)) == "?")
    return fail(CUDNN_STATUS_BAD_PARAM,
                concat(fn, ": algo ", static_cast<int>(algo), " is not an algorithm enumerant"));
  if (!ai.supported)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, concat(fn, ": algo ", algo_name(algo),
                                                   " does not support this "
                                                   "convolution: ",
                                                   ai.why_not));
  *bytes = ai.workspace;
  return CUDNN_STATUS_SUCCESS;
}
}  // namespace

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  return max_count("cudnnGetConvolutionForwardAlgorithmMaxCount", handle, count, CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  return max_count("cudnnGetConvolutionBackwardDataAlgorithmMaxCount", handle, count,
                   CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  return max_count("cudnnGetConvolutionBackwardFilterAlgorithmMaxCount", handle, count,
                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, cudnnTensorDescriptor_t x,
                                                     cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t conv,
                                                     cudnnTensorDescriptor_t y, int requested, int* returned,
                                                     cudnnConvolutionFwdAlgoPerf_t* results) {
  const char* fn = "cudnnGetConvolutionForwardAlgorithm_v7";
  Problem p;
  if (cudnnStatus_t s = query_problem(fn, Op::kForward, handle, x, w, conv, y, &p); s != CUDNN_STATUS_SUCCESS) return s;
  if (cudnnStatus_t s = check_heuristic_args(fn, requested, returned, results); s != CUDNN_STATUS_SUCCESS) return s;
  // Winograd first where it applies (cuDNN ranks it fastest for 3x3 filters), then the GEMM family.
  *returned = fill_heuristic<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      p,
      {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
       CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
       CUDNN_CONVOLUTION_FWD_ALGO_FFT, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD},
      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, forward_algo,
      {CUDNN_CONVOLUTION_FWD_ALGO_FFT, CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING}, requested, results);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, cudnnTensorDescriptor_t x,
                                                      cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t conv,
                                                      cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t algo,
                                                      size_t* bytes) {
  const char* fn = "cudnnGetConvolutionForwardWorkspaceSize";
  Problem p;
  if (cudnnStatus_t s = query_problem(fn, Op::kForward, handle, x, w, conv, y, &p); s != CUDNN_STATUS_SUCCESS) return s;
  return workspace(fn, forward_algo(p, algo), algo, bytes);
}
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha, cudnnTensorDescriptor_t x_desc,
                                      const void* x, cudnnFilterDescriptor_t w_desc, const void* w,
                                      cudnnConvolutionDescriptor_t conv, cudnnConvolutionFwdAlgo_t algo,
                                      void* workspace, size_t workspace_bytes, const void* beta,
                                      cudnnTensorDescriptor_t y_desc, void* y) {
  const RunArgs a{"cudnnConvolutionForward",
                  Op::kForward,
                  handle,
                  alpha,
                  beta,
                  x_desc,
                  x,
                  w_desc,
                  w,
                  conv,
                  y_desc,
                  y,
                  workspace,
                  workspace_bytes};
  return run(a, algo, forward_algo);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle, cudnnFilterDescriptor_t w,
                                                          cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t conv,
                                                          cudnnTensorDescriptor_t dx, int requested, int* returned,
                                                          cudnnConvolutionBwdDataAlgoPerf_t* results) {
  const char* fn = "cudnnGetConvolutionBackwardDataAlgorithm_v7";
  Problem p;
  if (cudnnStatus_t s = query_problem(fn, Op::kBackwardData, handle, dx, w, conv, dy, &p); s != CUDNN_STATUS_SUCCESS)
    return s;
  if (cudnnStatus_t s = check_heuristic_args(fn, requested, returned, results); s != CUDNN_STATUS_SUCCESS) return s;
  // The atomics-based ALGO_0 ranks first, as it often does on a GPU.
  *returned = fill_heuristic<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      p,
      {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED,
       CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING,
       CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD},
      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, backward_data_algo,
      {CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING}, requested, results);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, cudnnFilterDescriptor_t w,
                                                           cudnnTensorDescriptor_t dy,
                                                           cudnnConvolutionDescriptor_t conv,
                                                           cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
  const char* fn = "cudnnGetConvolutionBackwardDataWorkspaceSize";
  Problem p;
  if (cudnnStatus_t s = query_problem(fn, Op::kBackwardData, handle, dx, w, conv, dy, &p); s != CUDNN_STATUS_SUCCESS)
    return s;
  return workspace(fn, backward_data_algo(p, algo), algo, bytes);
}
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha, cudnnFilterDescriptor_t w_desc,
                                           const void* w, cudnnTensorDescriptor_t dy_desc, const void* dy,
                                           cudnnConvolutionDescriptor_t conv, cudnnConvolutionBwdDataAlgo_t algo,
                                           void* workspace, size_t workspace_bytes, const void* beta,
                                           cudnnTensorDescriptor_t dx_desc, void* dx) {
  const RunArgs a{"cudnnConvolutionBackwardData",
                  Op::kBackwardData,
                  handle,
                  alpha,
                  beta,
                  dx_desc,
                  dx,
                  w_desc,
                  w,
                  conv,
                  dy_desc,
                  dy,
                  workspace,
                  workspace_bytes};
  return run(a, algo, backward_data_algo);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle, cudnnTensorDescriptor_t x,
                                                            cudnnTensorDescriptor_t dy,
                                                            cudnnConvolutionDescriptor_t conv,
                                                            cudnnFilterDescriptor_t dw, int requested, int* returned,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* results) {
  const char* fn = "cudnnGetConvolutionBackwardFilterAlgorithm_v7";
  Problem p;
  if (cudnnStatus_t s = query_problem(fn, Op::kBackwardFilter, handle, x, dw, conv, dy, &p); s != CUDNN_STATUS_SUCCESS)
    return s;
  if (cudnnStatus_t s = check_heuristic_args(fn, requested, returned, results); s != CUDNN_STATUS_SUCCESS) return s;
  // The atomics-based ALGO_0 and ALGO_3 rank first, as they often do on a GPU.
  *returned = fill_heuristic<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      p,
      {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3,
       CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
       CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT},
      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, backward_filter_algo,
      {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING}, requested, results);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle, cudnnTensorDescriptor_t x,
                                                             cudnnTensorDescriptor_t dy,
                                                             cudnnConvolutionDescriptor_t conv,
                                                             cudnnFilterDescriptor_t dw,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
  const char* fn = "cudnnGetConvolutionBackwardFilterWorkspaceSize";
  Problem p;
  if (cudnnStatus_t s = query_problem(fn, Op::kBackwardFilter, handle, x, dw, conv, dy, &p); s != CUDNN_STATUS_SUCCESS)
    return s;
  return workspace(fn, backward_filter_algo(p, algo), algo, bytes);
}
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha, cudnnTensorDescriptor_t x_desc,
                                             const void* x, cudnnTensorDescriptor_t dy_desc, const void* dy,
                                             cudnnConvolutionDescriptor_t conv, cudnnConvolutionBwdFilterAlgo_t algo,
                                             void* workspace, size_t workspace_bytes, const void* beta,
                                             cudnnFilterDescriptor_t dw_desc, void* dw) {
  const RunArgs a{"cudnnConvolutionBackwardFilter",
                  Op::kBackwardFilter,
                  handle,
                  alpha,
                  beta,
                  x_desc,
                  x,
                  dw_desc,
                  dw,
                  conv,
                  dy_desc,
                  dy,
                  workspace,
                  workspace_bytes};
  return run(a, algo, backward_filter_algo);
}
