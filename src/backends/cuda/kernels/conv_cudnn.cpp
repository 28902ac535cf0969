// CUDA conv2d through cuDNN's convolution API (kernels/conv.h's Conv2dForwardFn / Conv2dBackwardFn):
// the legacy descriptor API that cuDNN 9 still ships in cudnn_cnn.h (cudnnConvolutionForward,
// cudnnConvolutionBackwardData, cudnnConvolutionBackwardFilter), for fp32, fp16, bf16 and fp64 NCHW
// contiguous tensors with any stride, padding, dilation and groups. Built only when cmake/Cudnn.cmake
// finds cuDNN (MIXTRAIN_WITH_CUDNN); docs/cuda.md.
//
// Numerics (cuDNN API reference, cudnn_cnn and cudnn_graph libraries):
// - Compute type: the convolution descriptor's computeType is CUDNN_DATA_FLOAT for fp32, fp16 and
//   bf16 -- cuDNN's FLOAT_CONFIG, PSEUDO_HALF_CONFIG and PSEUDO_BFLOAT16_CONFIG: 16-bit storage, fp32
//   arithmetic and accumulation, each output rounded once on store -- and CUDNN_DATA_DOUBLE for fp64.
//   The weight gradient, a sum over N * Ho * Wo products, is thereby accumulated in fp32 and rounded
//   once into the weight's dtype by cuDNN itself (the bf16/fp16 pseudo configurations), so it needs no
//   fp32 scratch; tests/cuda/test_cuda_conv.cpp checks this on a GPU (a sum of 3136 terms kept in bf16
//   would miss its one-rounding tolerance many times over).
// - Math type: fp32 runs CUDNN_FMA_MATH (FMA kernels only; CUDNN_DEFAULT_MATH would permit TF32
//   tensor cores on Ampere and newer) unless mixtrain::cuda::allow_tf32() -- then CUDNN_DEFAULT_MATH,
//   as PyTorch does. fp16 and bf16 run CUDNN_TENSOR_OP_MATH (tensor cores, fp32 accumulation); fp64
//   CUDNN_DEFAULT_MATH. CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION (fp32 operands down-converted to 16 bits)
//   is never used.
// - Algorithms: cuDNN's heuristic list (cudnnGetConvolution*Algorithm_v7), keeping the entries whose
//   status is success, whose determinism is CUDNN_DETERMINISTIC (one run gives the bits of the next)
//   and whose math type keeps the rule above, GEMM-based algorithms first (implicit GEMM, precomputed
//   implicit GEMM, GEMM and direct forward; ALGO_1 backward): FFT and Winograd transforms round in
//   the transformed domain, an error that follows whole tiles' magnitudes instead of each output's own
//   products (the CPU's error model, which tests/support/tolerances.h assumes), so such an entry is
//   taken only where cuDNN offers no GEMM-based one. The first entry whose workspace, asked for with
//   the math type it will run with, is at most 1 GiB wins; none is an mt::Error naming the op, the
//   problem (shapes, dtype), the device and cuDNN's list. The choice is made once per (direction,
//   shapes, geometry, dtype, TF32) and cached per device, as matmul.cpp caches cuBLASLt's.
// - Bias: added after the convolution by mixtrain's add kernel (fp32 arithmetic, one rounding): a
//   16-bit output is thus rounded twice (the convolution's value, then the sum), as in PyTorch's cuDNN
//   path, where the CPU's oneDNN primitive fuses the bias into one rounding. The bias gradient is
//   mixtrain's own sum of gy over N, Ho and Wo in fp32 (the reduce kernel per image, then sum_rows over
//   the images: a fixed order, deterministic), rounded once.
// - Workspace: from the stream-ordered caching allocator, per call (cudaMalloc only while the cache
//   grows): released once the call is queued, for later work on the same stream.
// One cudnnHandle_t per device, bound to mixtrain::cuda::stream(device). A cuDNN handle must not be
// used by two host threads at once, so every use holds the device's mutex. Every cuDNN status is
// checked: an mt::Error names the direction, the call, cudnnGetErrorString (and cuDNN's last-error
// detail) and the problem.
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "core/views.h"
#include "kernels/conv.h"
#include "kernels/copy.h"
#include "backends/cuda/kernels/register.h"
#include "kernels/elementwise.h"
#include "kernels/linalg.h"
#include "kernels/reduce.h"
#include "mixtrain/cuda.h"
#include "mixtrain/memory.h"

namespace mixtrain::kernels {

namespace cuda {
namespace {

using mixtrain::cuda::DeviceGuard;

constexpr int kMaxDevices = 64;
constexpr size_t kMaxWorkspaceBytes = size_t{1} << 30;

enum class Direction : int64_t { kForward, kBackwardData, kBackwardFilter };

std::string_view to_string(Direction d) {
  switch (d) {
    case Direction::kForward: return "conv2d";
    case Direction::kBackwardData: return "conv2d backward (input gradient)";
    case Direction::kBackwardFilter: return "conv2d backward (weight gradient)";
  }
  return "conv2d";
}

// One convolution: x [N, C, H, W], w [O, C / groups, KH, KW], y [N, O, Ho, Wo], all of `dtype`.
struct Problem {
  Device device;
  DType dtype;
  int64_t N, C, H, W, O, KH, KW, Ho, Wo;
  Conv2dGeometry g;
};

Problem problem_of(const Shape& x, const Shape& w, const Shape& y, const Conv2dGeometry& g, DType dtype,
                   Device device) {
  return {device, dtype, x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], g};
}

std::string problem_text(const Problem& p) {
  return mixtrain::detail::concat("input [", p.N, ", ", p.C, ", ", p.H, ", ", p.W, "] and weight [", p.O, ", ",
                                  p.C / p.g.groups, ", ", p.KH, ", ", p.KW, "] -> output [", p.N, ", ", p.O, ", ", p.Ho,
                                  ", ", p.Wo, "] in ", p.dtype, " (stride ", p.g.stride_h, "x", p.g.stride_w,
                                  ", padding ", p.g.pad_h, "x", p.g.pad_w, ", dilation ", p.g.dil_h, "x", p.g.dil_w,
                                  ", groups ", p.g.groups, ")");
}

// Throws an mt::Error naming `what`, the cuDNN call and its status, unless `status` is success.
void check_cudnn(cudnnStatus_t status, const char* call, const std::string& what) {
  if (status == CUDNN_STATUS_SUCCESS) [[likely]]
    return;
  char detail_text[1024] = {};
  cudnnGetLastErrorString(detail_text, sizeof(detail_text));
  MT_FAIL(what, ": cuDNN ", call, " failed: ", cudnnGetErrorString(status), " (", static_cast<int>(status), ")",
          detail_text[0] != '\0' ? std::string(": ") + detail_text : std::string());
}
void check_cudnn(cudnnStatus_t status, const char* call, Direction dir, const Problem& p) {
  if (status == CUDNN_STATUS_SUCCESS) [[likely]]
    return;
  check_cudnn(status, call, mixtrain::detail::concat(to_string(dir), " on ", p.device, " of ", problem_text(p)));
}

// ---- per-device state: the handle and the cached algorithm choices
struct Choice {
  int algo;
  cudnnMathType_t math;
  size_t workspace;
};
// direction, N, C, H, W, O, KH, KW, stride h/w, padding h/w, dilation h/w, groups, dtype, TF32
using Key = std::array<int64_t, 17>;

struct DeviceState {
  cudnnHandle_t handle = nullptr;
  // A cuDNN handle serves one host thread at a time: held around every use of the handle. Also
  // guards `choices`.
  std::mutex mu;
  std::map<Key, Choice> choices;
};

std::array<std::atomic<DeviceState*>, kMaxDevices> states{};
std::mutex states_mu;

DeviceState& state(Device device) {
  MT_INTERNAL_ASSERT(device.index >= 0 && device.index < kMaxDevices, "conv2d: device index ", device.index);
  DeviceState* s = states[device.index].load(std::memory_order_acquire);
  if (s != nullptr) return *s;
  std::lock_guard lock(states_mu);
  s = states[device.index].load(std::memory_order_acquire);
  if (s == nullptr) {
    const std::string what = mixtrain::detail::concat("conv2d on ", device);
    // The sub-libraries (libcudnn_cnn, ...) must be the major version these headers describe.
    const size_t loaded = cudnnGetVersion();
    MT_CHECK(loaded / 10000 == CUDNN_MAJOR, what, ": mixtrain was built against cuDNN ", CUDNN_MAJOR, ".", CUDNN_MINOR,
             ".", CUDNN_PATCHLEVEL, " but the process loaded cuDNN ", loaded / 10000, ".", loaded / 100 % 100, ".",
             loaded % 100, " (libcudnn.so.", CUDNN_MAJOR, " is found through the library path)");
    DeviceGuard guard(device);
    auto fresh = std::make_unique<DeviceState>();
    check_cudnn(cudnnCreate(&fresh->handle), "cudnnCreate", what);
    const cudnnStatus_t bound = cudnnSetStream(fresh->handle, mixtrain::cuda::stream(device));
    if (bound != CUDNN_STATUS_SUCCESS) cudnnDestroy(fresh->handle);
    check_cudnn(bound, "cudnnSetStream", what);
    s = fresh.release();  // kept for the process: handles must outlive every convolution
    states[device.index].store(s, std::memory_order_release);
  }
  return *s;
}

// ---- descriptors
template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Descriptor {
 public:
  Descriptor(const char* create_name, const std::string& what) { check_cudnn(Create(&d_), create_name, what); }
  ~Descriptor() {
    if (d_ != nullptr) Destroy(d_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  T get() const { return d_; }

 private:
  T d_ = nullptr;
};
using TensorDescriptor =
    Descriptor<cudnnTensorDescriptor_t, &cudnnCreateTensorDescriptor, &cudnnDestroyTensorDescriptor>;
using FilterDescriptor =
    Descriptor<cudnnFilterDescriptor_t, &cudnnCreateFilterDescriptor, &cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    Descriptor<cudnnConvolutionDescriptor_t, &cudnnCreateConvolutionDescriptor, &cudnnDestroyConvolutionDescriptor>;

cudnnDataType_t cudnn_type(DType d) {
  switch (d) {
    case kFloat32: return CUDNN_DATA_FLOAT;
    case kFloat64: return CUDNN_DATA_DOUBLE;
    case kFloat16: return CUDNN_DATA_HALF;
    case kBFloat16: return CUDNN_DATA_BFLOAT16;
    default: MT_FAIL("conv2d: no CUDA conv2d for dtype ", d);
  }
}

// The descriptors of p: x, w and y packed NCHW / KCRS, cross-correlation (PyTorch's convolution)
// computed in fp32 (fp64 for fp64), `groups` groups. The math type is set per algorithm.
struct Descriptors {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;

  Descriptors(Direction dir, const Problem& p, const std::string& what)
      : x("cudnnCreateTensorDescriptor", what),
        y("cudnnCreateTensorDescriptor", what),
        w("cudnnCreateFilterDescriptor", what),
        conv("cudnnCreateConvolutionDescriptor", what) {
    const cudnnDataType_t type = cudnn_type(p.dtype);
    const cudnnDataType_t compute = p.dtype == kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    auto i = [](int64_t v) { return static_cast<int>(v); };  // in range: see check_int_range
    check_cudnn(cudnnSetTensor4dDescriptor(x.get(), CUDNN_TENSOR_NCHW, type, i(p.N), i(p.C), i(p.H), i(p.W)),
                "cudnnSetTensor4dDescriptor (input)", dir, p);
    check_cudnn(cudnnSetTensor4dDescriptor(y.get(), CUDNN_TENSOR_NCHW, type, i(p.N), i(p.O), i(p.Ho), i(p.Wo)),
                "cudnnSetTensor4dDescriptor (output)", dir, p);
    check_cudnn(
        cudnnSetFilter4dDescriptor(w.get(), type, CUDNN_TENSOR_NCHW, i(p.O), i(p.C / p.g.groups), i(p.KH), i(p.KW)),
        "cudnnSetFilter4dDescriptor", dir, p);
    check_cudnn(
        cudnnSetConvolution2dDescriptor(conv.get(), i(p.g.pad_h), i(p.g.pad_w), i(p.g.stride_h), i(p.g.stride_w),
                                        i(p.g.dil_h), i(p.g.dil_w), CUDNN_CROSS_CORRELATION, compute),
        "cudnnSetConvolution2dDescriptor", dir, p);
    check_cudnn(cudnnSetConvolutionGroupCount(conv.get(), i(p.g.groups)), "cudnnSetConvolutionGroupCount", dir, p);
  }
};

// cuDNN's legacy API counts elements and dims in int.
void check_int_range(Direction dir, const Problem& p) {
  const int64_t numels[] = {p.N * p.C * p.H * p.W, p.N * p.O * p.Ho * p.Wo, p.O * (p.C / p.g.groups) * p.KH * p.KW};
  const int64_t geometry[] = {p.g.stride_h, p.g.stride_w, p.g.pad_h, p.g.pad_w, p.g.dil_h, p.g.dil_w, p.g.groups};
  bool ok = true;
  for (int64_t n : numels) ok = ok && n <= INT_MAX;
  for (int64_t v : geometry) ok = ok && v <= INT_MAX;
  MT_CHECK(ok, to_string(dir), " on ", p.device, ": cuDNN's convolution API counts elements in 32-bit ints, and ",
           problem_text(p), " has a tensor of 2^31 or more elements; split the batch");
}

// ---- algorithm choice
// The math type the descriptor asks the heuristic with.
cudnnMathType_t requested_math(DType dtype, bool tf32) {
  switch (dtype) {
    case kFloat32: return tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    case kFloat16:
    case kBFloat16: return CUDNN_TENSOR_OP_MATH;
    default: return CUDNN_DEFAULT_MATH;
  }
}

// The math type to run a heuristic entry proposed with `proposed`, or nothing when the entry breaks
// the rule: no down-conversion ever; for fp32 without TF32, FMA kernels only.
std::optional<cudnnMathType_t> run_math(DType dtype, bool tf32, cudnnMathType_t proposed) {
  if (proposed == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return std::nullopt;
  if (dtype == kFloat32 && !tf32) {
    if (proposed == CUDNN_TENSOR_OP_MATH) return std::nullopt;
    return CUDNN_FMA_MATH;
  }
  return proposed;
}

bool gemm_like(Direction dir, int algo) {
  switch (dir) {
    case Direction::kForward:
      return algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
             algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM || algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM ||
             algo == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
    case Direction::kBackwardData:
      return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    case Direction::kBackwardFilter:
      return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
             algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
  }
  return false;
}

// One heuristic entry, whatever its direction.
struct Candidate {
  int algo;
  cudnnStatus_t status;
  cudnnDeterminism_t determinism;
  cudnnMathType_t math;
};

template <typename Perf>
std::vector<Candidate> candidates_of(const std::vector<Perf>& perf, int returned) {
  std::vector<Candidate> out;
  for (int i = 0; i < std::min<int>(returned, static_cast<int>(perf.size())); ++i)
    out.push_back({static_cast<int>(perf[i].algo), perf[i].status, perf[i].determinism, perf[i].mathType});
  return out;
}

// cuDNN's heuristic entries for dir, best first.
std::vector<Candidate> heuristic(cudnnHandle_t h, const Descriptors& d, Direction dir, const Problem& p) {
  int max_count = 0, returned = 0;
  switch (dir) {
    case Direction::kForward: {
      check_cudnn(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count),
                  "cudnnGetConvolutionForwardAlgorithmMaxCount", dir, p);
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(std::max(max_count, 1));
      check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                         static_cast<int>(perf.size()), &returned, perf.data()),
                  "cudnnGetConvolutionForwardAlgorithm_v7", dir, p);
      return candidates_of(perf, returned);
    }
    case Direction::kBackwardData: {
      check_cudnn(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_count),
                  "cudnnGetConvolutionBackwardDataAlgorithmMaxCount", dir, p);
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(std::max(max_count, 1));
      check_cudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                              static_cast<int>(perf.size()), &returned, perf.data()),
                  "cudnnGetConvolutionBackwardDataAlgorithm_v7", dir, p);
      return candidates_of(perf, returned);
    }
    case Direction::kBackwardFilter: {
      check_cudnn(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max_count),
                  "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount", dir, p);
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(std::max(max_count, 1));
      check_cudnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                                static_cast<int>(perf.size()), &returned, perf.data()),
                  "cudnnGetConvolutionBackwardFilterAlgorithm_v7", dir, p);
      return candidates_of(perf, returned);
    }
  }
  return {};
}

// The workspace `algo` needs with the descriptor's current math type; the status is returned, not
// thrown: an entry that cannot run with the math type is skipped.
cudnnStatus_t workspace_size(cudnnHandle_t h, const Descriptors& d, Direction dir, int algo, size_t* bytes) {
  switch (dir) {
    case Direction::kForward:
      return cudnnGetConvolutionForwardWorkspaceSize(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                     static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
    case Direction::kBackwardData:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
    case Direction::kBackwardFilter:
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

// The cached choice for p in direction dir, made on first use (under st.mu).
Choice choose(DeviceState& st, const Descriptors& d, Direction dir, const Problem& p, bool tf32) {
  const int64_t dt = static_cast<int64_t>(p.dtype), d_id = static_cast<int64_t>(dir);
  const Key key{d_id,         p.N,       p.C,       p.H,       p.W,       p.O,        p.KH, p.KW, p.g.stride_h,
                p.g.stride_w, p.g.pad_h, p.g.pad_w, p.g.dil_h, p.g.dil_w, p.g.groups, dt,   tf32};
  if (auto it = st.choices.find(key); it != st.choices.end()) return it->second;

  // cuDNN's output size (floor rounding, as the front-end's) must be the one the caller allocated.
  int n = 0, c = 0, h = 0, w = 0;
  check_cudnn(cudnnGetConvolution2dForwardOutputDim(d.conv.get(), d.x.get(), d.w.get(), &n, &c, &h, &w),
              "cudnnGetConvolution2dForwardOutputDim", dir, p);
  MT_INTERNAL_ASSERT(n == p.N && c == p.O && h == p.Ho && w == p.Wo, "conv2d: cuDNN's output [", n, ", ", c, ", ", h,
                     ", ", w, "] differs from the front-end's for ", problem_text(p));

  check_cudnn(cudnnSetConvolutionMathType(d.conv.get(), requested_math(p.dtype, tf32)), "cudnnSetConvolutionMathType",
              dir, p);
  const std::vector<Candidate> list = heuristic(st.handle, d, dir, p);
  std::string seen;  // for the error message
  for (const Candidate& cand : list)
    seen +=
        mixtrain::detail::concat(seen.empty() ? "" : ", ", "algo ", cand.algo, " (", cudnnGetErrorString(cand.status),
                                 cand.determinism == CUDNN_DETERMINISTIC ? ", deterministic" : ", non-deterministic",
                                 ", math ", static_cast<int>(cand.math), ")");
  // GEMM-based algorithms first; a deterministic transform-based one only where cuDNN offers no
  // GEMM-based one (a convolution that runs beats a refusal; its error then follows whole tiles).
  std::optional<Choice> chosen;
  for (bool gemm_only : {true, false}) {
    for (const Candidate& cand : list) {
      if (chosen || cand.status != CUDNN_STATUS_SUCCESS || cand.determinism != CUDNN_DETERMINISTIC ||
          gemm_like(dir, cand.algo) != gemm_only)
        continue;
      const std::optional<cudnnMathType_t> math = run_math(p.dtype, tf32, cand.math);
      if (!math) continue;
      check_cudnn(cudnnSetConvolutionMathType(d.conv.get(), *math), "cudnnSetConvolutionMathType", dir, p);
      size_t bytes = 0;
      if (workspace_size(st.handle, d, dir, cand.algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > kMaxWorkspaceBytes)
        continue;
      chosen = Choice{cand.algo, *math, bytes};
    }
  }
  MT_CHECK(chosen.has_value(), to_string(dir), " on ", p.device, ": cuDNN offers no deterministic algorithm ",
           "within ", kMaxWorkspaceBytes >> 20, " MiB of workspace",
           p.dtype == kFloat32 && !tf32 ? " without TF32" : "", " for ", problem_text(p),
           " (heuristic: ", seen.empty() ? std::string("no entries") : seen, ")");
  st.choices.emplace(key, *chosen);
  return *chosen;
}

// ---- running one call
// A workspace from the caching allocator, released at scope exit (stream-ordered: later work on the
// device's stream may reuse it at once).
class Workspace {
 public:
  Workspace(Device device, size_t nbytes)
      : device_(device), nbytes_(nbytes), ptr_(nbytes > 0 ? memory::allocate(nbytes, device, tag_) : nullptr) {}
  ~Workspace() {
    if (ptr_ != nullptr) memory::deallocate(ptr_, nbytes_, device_, tag_);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* data() const { return ptr_; }
  size_t size() const { return nbytes_; }

 private:
  Device device_;
  size_t nbytes_;
  memory::Tag tag_;  // before ptr_: allocate() fills it
  void* ptr_;
};

// cuDNN's scaling factors: double for fp64 data, float otherwise.
struct Scaling {
  float one_f = 1.0f, zero_f = 0.0f;
  double one_d = 1.0, zero_d = 0.0;
  bool f64;
  explicit Scaling(DType dtype) : f64(dtype == kFloat64) {}
  const void* one() const { return f64 ? static_cast<const void*>(&one_d) : &one_f; }
  const void* zero() const { return f64 ? static_cast<const void*>(&zero_d) : &zero_f; }
};

// Runs one convolution call of `dir` on p's device: forward writes y from x and w, backward-data
// writes x (the input gradient) from y (the output gradient) and w, backward-filter writes w (the
// weight gradient) from x and y.
void run(Direction dir, const Problem& p, void* x, void* w, void* y) {
  check_int_range(dir, p);
  DeviceState& st = state(p.device);
  DeviceGuard guard(p.device);
  std::lock_guard lock(st.mu);
  const Descriptors d(dir, p, mixtrain::detail::concat(to_string(dir), " on ", p.device));
  const bool tf32 = p.dtype == kFloat32 && mixtrain::cuda::allow_tf32();
  const Choice c = choose(st, d, dir, p, tf32);
  check_cudnn(cudnnSetConvolutionMathType(d.conv.get(), c.math), "cudnnSetConvolutionMathType", dir, p);
  const Workspace ws(p.device, c.workspace);
  const Scaling s(p.dtype);
  switch (dir) {
    case Direction::kForward:
      check_cudnn(cudnnConvolutionForward(st.handle, s.one(), d.x.get(), x, d.w.get(), w, d.conv.get(),
                                          static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), ws.data(), ws.size(),
                                          s.zero(), d.y.get(), y),
                  "cudnnConvolutionForward", dir, p);
      break;
    case Direction::kBackwardData:
      check_cudnn(cudnnConvolutionBackwardData(st.handle, s.one(), d.w.get(), w, d.y.get(), y, d.conv.get(),
                                               static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), ws.data(), ws.size(),
                                               s.zero(), d.x.get(), x),
                  "cudnnConvolutionBackwardData", dir, p);
      break;
    case Direction::kBackwardFilter:
      check_cudnn(cudnnConvolutionBackwardFilter(st.handle, s.one(), d.x.get(), x, d.y.get(), y, d.conv.get(),
                                                 static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), ws.data(),
                                                 ws.size(), s.zero(), d.w.get(), w),
                  "cudnnConvolutionBackwardFilter", dir, p);
      break;
  }
}

// cuDNN's legacy API picks kernels without seeing the pointers: every operand gets the alignment of
// a fresh allocation (the caching allocator's blocks are 512-byte aligned). A contiguous view that
// starts mid-vector is copied first (inputs) or written through an aligned buffer (outputs).
bool aligned(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0; }

Tensor aligned_input(const Tensor& t) {
  MT_INTERNAL_ASSERT(t.is_contiguous(), "conv2d: kernels take contiguous operands, got ", describe(t));
  if (aligned(t)) return t;
  Tensor c = Tensor::empty(t.shape(), t.dtype(), t.device());
  copy(c, t);
  return c;
}

class Output {
 public:
  explicit Output(const Tensor& t) : user_(t) {
    MT_INTERNAL_ASSERT(t.is_contiguous(), "conv2d: kernels write contiguous outputs, got ", describe(t));
    if (!aligned(t)) buffer_ = Tensor::empty(t.shape(), t.dtype(), t.device());
  }
  void* data() const { return buffer_.defined() ? buffer_.raw_data() : user_.raw_data(); }
  void finish() const {
    if (buffer_.defined()) copy(user_, buffer_);
  }

 private:
  const Tensor& user_;
  Tensor buffer_;
};

// y += bias (broadcast over N, Ho, Wo): mixtrain's add kernel, fp32 arithmetic, one rounding.
void add_bias(const Tensor& y, const Tensor& bias) {
  const Tensor b = views::expand(reshaped(bias, {1, bias.numel(), 1, 1}), y.shape());
  binary_kernel(BinaryOp::kAdd)(y.device(), y.dtype())(y, y, b, Scalars{.a = 1.0});
}

// gb = gy summed over N, Ho and Wo: per image and channel over Ho * Wo in the accumulation dtype
// (fp32; fp64 for fp64), then over the images in sum_rows' fixed order, rounded once into gb.
void bias_gradient(const Tensor& gy, const Tensor& gb) {
  const int64_t N = gy.size(0), O = gy.size(1), spatial = gy.size(2) * gy.size(3);
  MT_INTERNAL_ASSERT(gy.is_contiguous(), "conv2d: the output gradient must be contiguous, got ", describe(gy));
  const DType acc = gy.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const Tensor per_image = Tensor::empty({N, O}, acc, gy.device());
  reduce_kernel(ReduceKind::kSum)(gy.device(), gy.dtype())(per_image, gy, ReduceShape{N * O, spatial, 1}, 1.0);
  sum_rows(per_image, gb);
}

void forward_cudnn(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv2dGeometry& g) {
  if (y.numel() == 0) return;
  if (x.numel() == 0 || w.numel() == 0) {
    fill(y, 0.0);  // every output is an empty sum
  } else {
    const Problem p = problem_of(x.shape(), w.shape(), y.shape(), g, y.dtype(), y.device());
    const Tensor xa = aligned_input(x), wa = aligned_input(w);
    const Output out(y);
    run(Direction::kForward, p, xa.raw_data(), wa.raw_data(), out.data());
    out.finish();
  }
  if (bias.defined()) add_bias(y, bias);
}

void backward_cudnn(const Tensor& gy, const Tensor& x, const Tensor& w, const Tensor& gx, const Tensor& gw,
                    const Tensor& gb, const Conv2dGeometry& g) {
  const bool want_gx = gx.defined() && gx.numel() > 0, want_gw = gw.defined() && gw.numel() > 0;
  Tensor gya;  // gy aligned once for both calls
  if ((want_gx || want_gw) && gy.numel() > 0) gya = aligned_input(gy);
  if (want_gx) {
    if (gy.numel() == 0 || w.numel() == 0) {
      fill(gx, 0.0);
    } else {
      const Problem p = problem_of(gx.shape(), w.shape(), gy.shape(), g, gy.dtype(), gy.device());
      const Tensor wa = aligned_input(w);
      const Output out(gx);
      run(Direction::kBackwardData, p, out.data(), wa.raw_data(), gya.raw_data());
      out.finish();
    }
  }
  if (want_gw) {
    if (gy.numel() == 0 || x.numel() == 0) {
      fill(gw, 0.0);
    } else {
      const Problem p = problem_of(x.shape(), gw.shape(), gy.shape(), g, gy.dtype(), gy.device());
      const Tensor xa = aligned_input(x);
      const Output out(gw);
      run(Direction::kBackwardFilter, p, xa.raw_data(), out.data(), gya.raw_data());
      out.finish();
    }
  }
  if (gb.defined() && gb.numel() > 0) {
    if (gy.numel() == 0)
      fill(gb, 0.0);
    else
      bias_gradient(gy, gb);
  }
}

}  // namespace

void register_cuda_conv(const Registry& r) {
  for (DType d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    r.set(conv2d_forward_table, d, &forward_cudnn);
    r.set(conv2d_backward_table, d, &backward_cudnn);
  }
}

}  // namespace cuda
}  // namespace mixtrain::kernels
