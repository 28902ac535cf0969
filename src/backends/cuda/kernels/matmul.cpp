// CUDA matmul through cuBLASLt (kernels/linalg.h's MatmulFn): fp32, fp64, and bf16/fp16 with fp32
// accumulation, bias fused as an epilogue, transposed operands passed as layouts (no copies),
// batches as one strided-batched call where the strides allow it. The same call serves the
// widening product (bf16/fp16 A and B, fp32 C and D: the fused head's products) and the
// accumulating one (beta = 1: out += a @ b, the fused head's weight-gradient sum).
//
// Numerics: 16-bit inputs, fp32 compute and scale type (CUBLAS_COMPUTE_32F), split-K reductions
// only in fp32 (the preference's reduction-scheme mask forbids reductions in the output type: the
// same rule as PyTorch's default). fp32 runs in full fp32 unless TF32 is allowed explicitly
// (set_allow_tf32 / MIXTRAIN_ALLOW_TF32=1). Algorithms are chosen once per problem by cuBLASLt's
// heuristic and cached; the 32 MiB workspace (the size cuBLAS recommends on Hopper) is allocated
// once per device.
#include <cublasLt.h>

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "backends/cuda/cuda_backend.h"
#include "core/views.h"
#include "kernels/copy.h"
#include "backends/cuda/kernels/register.h"
#include "kernels/linalg.h"
#include "mixtrain/cuda.h"

namespace mixtrain::kernels {

namespace cuda {
namespace {

using mixtrain::cuda::check;
using mixtrain::cuda::DeviceGuard;

// cuBLAS's own status names live in libcublas, which nothing else here needs.
const char* status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED (out of device memory)";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH (not supported on this GPU)";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS status";
  }
}

void check_lt(cublasStatus_t status, const char* what) {
#ifdef MIXTRAIN_CUDA_ON_HOST  // the host's cuBLASLt says which documented rule a call broke
  MT_CHECK(status == CUBLAS_STATUS_SUCCESS, "cuda: cuBLASLt ", what, " failed: ", status_name(status), " (",
           static_cast<int>(status), "): ", cublas_host_last_error());
#else
  MT_CHECK(status == CUBLAS_STATUS_SUCCESS, "cuda: cuBLASLt ", what, " failed: ", status_name(status), " (",
           static_cast<int>(status), ")");
#endif
}

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr int kMaxDevices = 64;

struct DeviceState {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::mutex mu;  // guards the algorithm cache
  std::map<std::array<int64_t, 16>, cublasLtMatmulAlgo_t> algos;
};

std::array<std::atomic<DeviceState*>, kMaxDevices> states{};
std::mutex states_mu;

DeviceState& state(Device device) {
  DeviceState* s = states[device.index].load(std::memory_order_acquire);
  if (s != nullptr) return *s;
  std::lock_guard lock(states_mu);
  s = states[device.index].load(std::memory_order_acquire);
  if (s == nullptr) {
    DeviceGuard guard(device);
    s = new DeviceState();  // kept for the process: handles must outlive every matmul
    check_lt(cublasLtCreate(&s->handle), "create");
    check(cudaMalloc(&s->workspace, kWorkspaceBytes), "cudaMalloc (cuBLASLt workspace)");
    states[device.index].store(s, std::memory_order_release);
  }
  return *s;
}

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case kFloat32: return CUDA_R_32F;
    case kFloat64: return CUDA_R_64F;
    case kFloat16: return CUDA_R_16F;
    case kBFloat16: return CUDA_R_16BF;
    default: MT_FAIL("matmul: no CUDA matmul for dtype ", d);
  }
}

// A row-major [rows, cols] view with strides (s0, s1) as a cuBLASLt operand: the column-major
// matrix [cols, rows] (op N) when rows are contiguous, or [rows, cols] transposed (op T) when
// columns are. `ok` is false for other layouts (the caller copies those).
struct Operand {
  bool ok = false;
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t stored_rows = 0, stored_cols = 0, ld = 0;
};

Operand as_operand(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  Operand o;
  if ((s1 == 1 || cols == 1) && (rows == 1 || s0 >= cols)) {
    o = {true, CUBLAS_OP_N, cols, rows, rows == 1 ? cols : s0};
  } else if ((s0 == 1 || rows == 1) && (cols == 1 || s1 >= rows)) {
    o = {true, CUBLAS_OP_T, rows, cols, cols == 1 ? rows : s1};
  }
  if (o.ok && o.ld < o.stored_rows) o.ld = o.stored_rows;
  return o;
}

// The single batch stride of `t`'s batch dims relative to out's batch shape (0 for a broadcast
// operand), or -1 when no single stride describes them.
int64_t batch_stride(const Tensor& t, const Tensor& out) {
  const int batch_dims = out.dim() - 2;
  int64_t stride = -1, expected_next = -1;
  bool all_broadcast = true;
  for (int d = batch_dims - 1; d >= 0; --d) {
    if (out.size(d) == 1) continue;
    if (t.size(d) == 1) {
      if (!all_broadcast) return -1;
      continue;
    }
    if (stride < 0) {
      stride = t.stride(d);
      expected_next = t.stride(d) * t.size(d);
      all_broadcast = false;
    } else {
      if (all_broadcast || t.stride(d) != expected_next) return -1;
      expected_next = t.stride(d) * t.size(d);
    }
  }
  if (all_broadcast) return 0;
  // Dims of t that broadcast inside non-broadcast ones cannot share one stride.
  for (int d = 0; d < batch_dims; ++d)
    if (out.size(d) != 1 && t.size(d) == 1) return -1;
  return stride;
}

// The largest power of two up to 256 that divides the address: what the heuristic may assume.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t bytes = 256;
  while (bytes > 1 && a % bytes != 0) bytes /= 2;
  return bytes;
}

// Whether `t` broadcasts some of out's batch dims but not all: then even a contiguous copy of it has
// no single batch stride (batch_stride gives -1).
bool partly_broadcast(const Tensor& t, const Tensor& out) {
  bool broadcast = false, batched = false;
  for (int d = 0; d < out.dim() - 2; ++d) {
    if (out.size(d) == 1) continue;
    (t.size(d) == 1 ? broadcast : batched) = true;
  }
  return broadcast && batched;
}

struct Problem {
  Operand a, b;  // cuBLASLt's A = our b^T, B = our a^T
  int64_t m, n, k, batch, stride_a, stride_b, stride_c;
};

// dtype: A's and B's; out_dtype: C's and D's (the bias's too) -- dtype itself, or fp32 for 16-bit
// inputs. accumulate: D = A B + C (beta 1), else beta 0.
void run_lt(Device device, DType dtype, DType out_dtype, const Problem& p, const void* a_ptr, const void* b_ptr,
            void* c_ptr, const void* bias, bool accumulate) {
  DeviceState& st = state(device);
  DeviceGuard guard(device);
  const cudaStream_t stream = mixtrain::cuda::stream(device);
  const cudaDataType_t type = cuda_type(dtype), out_type = cuda_type(out_dtype);
  const bool f64 = dtype == kFloat64;
  const bool tf32 = dtype == kFloat32 && mixtrain::cuda::allow_tf32();
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : (tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
  const cudaDataType_t scale_type = f64 ? CUDA_R_64F : CUDA_R_32F;

  cublasLtMatmulDesc_t op_desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  auto cleanup = [&] {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op_desc) cublasLtMatmulDescDestroy(op_desc);
  };
  try {
    check_lt(cublasLtMatmulDescCreate(&op_desc, compute, scale_type), "descriptor");
    check_lt(cublasLtMatmulDescSetAttribute(op_desc, CUBLASLT_MATMUL_DESC_TRANSA, &p.a.op, sizeof(p.a.op)), "transa");
    check_lt(cublasLtMatmulDescSetAttribute(op_desc, CUBLASLT_MATMUL_DESC_TRANSB, &p.b.op, sizeof(p.b.op)), "transb");
    if (bias != nullptr) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      check_lt(cublasLtMatmulDescSetAttribute(op_desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "epilogue");
      check_lt(cublasLtMatmulDescSetAttribute(op_desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)), "bias");
      check_lt(cublasLtMatmulDescSetAttribute(op_desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &out_type,
                                              sizeof(out_type)),
               "bias type");
    }
    auto layout = [&](cublasLtMatrixLayout_t* l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld,
                      int64_t stride) {
      check_lt(cublasLtMatrixLayoutCreate(l, t, rows, cols, ld), "layout");
      if (p.batch > 1) {
        const int32_t count = static_cast<int32_t>(p.batch);
        check_lt(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)), "batch");
        check_lt(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
                 "batch stride");
      }
    };
    layout(&la, type, p.a.stored_rows, p.a.stored_cols, p.a.ld, p.stride_a);
    layout(&lb, type, p.b.stored_rows, p.b.stored_cols, p.b.ld, p.stride_b);
    layout(&lc, out_type, p.m, p.n, p.m, p.stride_c);

    // The algorithm is chosen for the operands' actual alignment (the preference below says it), and
    // cached under it: a kernel picked for 16-byte operands may fault on a view that starts
    // mid-vector, and that fault would poison the context for every later call.
    const uint32_t align_a = alignment_of(b_ptr), align_b = alignment_of(a_ptr), align_c = alignment_of(c_ptr);
    const std::array<int64_t, 16> key{p.m, p.n, p.k, p.a.op, p.b.op, p.a.ld, p.b.ld, p.batch, p.stride_a, p.stride_b,
                                      static_cast<int64_t>(dtype) | static_cast<int64_t>(out_dtype) << 8,
                                      bias != nullptr, tf32, align_a, align_b,
                                      int64_t{align_c} | (p.stride_c << 16)};
    cublasLtMatmulAlgo_t algo;
    bool cached = false;
    {
      std::lock_guard lock(st.mu);
      auto it = st.algos.find(key);
      if (it != st.algos.end()) {
        algo = it->second;
        cached = true;
      }
    }
    if (!cached) {
      check_lt(cublasLtMatmulPreferenceCreate(&pref), "preference");
      const uint64_t ws = kWorkspaceBytes;
      check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
               "workspace");
      // Split-K partial sums only in the compute type (fp32), never rounded to 16 bits in between.
      const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                    sizeof(schemes)),
               "reduction scheme");
      // cuBLASLt's A is our b, its B our a; C and D are out.
      const std::array<std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t>, 4> alignments{
          {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
           {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
           {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
           {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c}}};
      for (const auto& [attribute, bytes] : alignments)
        check_lt(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &bytes, sizeof(bytes)), "alignment");
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      check_lt(cublasLtMatmulAlgoGetHeuristic(st.handle, op_desc, la, lb, lc, lc, pref, 1, &result, &found), "heuristic");
      MT_CHECK(found > 0, "matmul: cuBLASLt has no algorithm for ", p.m, "x", p.n, "x", p.k, " ", dtype);
      algo = result.algo;
      std::lock_guard lock(st.mu);
      st.algos.emplace(key, algo);
    }
    const float one_f = 1.0f, zero_f = 0.0f;
    const double one_d = 1.0, zero_d = 0.0;
    const void* alpha = f64 ? static_cast<const void*>(&one_d) : &one_f;
    const void* beta = f64 ? (accumulate ? static_cast<const void*>(&one_d) : &zero_d)
                           : (accumulate ? static_cast<const void*>(&one_f) : &zero_f);
    check_lt(cublasLtMatmul(st.handle, op_desc, alpha, b_ptr, la, a_ptr, lb, beta, c_ptr, lc, c_ptr, lc, &algo,
                            st.workspace, kWorkspaceBytes, stream),
             "matmul");
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
}

// out (=, or += with accumulate) a @ b (+ bias): a and b share one dtype; out has it too, or is fp32
// for 16-bit a and b (the bias then is fp32 as well).
void matmul_lt(const Tensor& a_in, const Tensor& b_in, const Tensor& bias, const Tensor& out, bool accumulate) {
  const int r = out.dim();
  const int64_t n = out.size(r - 2), m = out.size(r - 1), k = a_in.size(r - 1);
  if (out.numel() == 0) return;
  if (k == 0) {
    MT_CHECK(!bias.defined(), "matmul: a bias with an empty inner dimension is not supported on cuda");
    if (!accumulate) fill_table(out.device(), out.dtype())(out, 0.0);
    return;
  }
  Tensor a = a_in, b = b_in;
  Operand oa = as_operand(n, k, a.stride(r - 2), a.stride(r - 1));
  Operand ob = as_operand(k, m, b.stride(r - 2), b.stride(r - 1));
  int64_t sa = batch_stride(a, out), sb = batch_stride(b, out);
  // Layouts cuBLASLt cannot take are copied first (a copy kernel on the device) into a contiguous
  // operand of the same shape, which keeps a broadcast batch (stride 0, no copy per batch). Only a
  // dim broadcast inside other batch dims (a [2, 1, n, k] operand of a [2, 3, n, m] product) has no
  // single batch stride even then: such an operand is materialised with out's batch dims.
  auto materialised = [&out, r](const Tensor& t) {
    Shape shape = t.shape();
    if (partly_broadcast(t, out)) {
      shape = out.shape();
      shape[r - 2] = t.size(r - 2);
      shape[r - 1] = t.size(r - 1);
    }
    Tensor c = Tensor::empty(shape, t.dtype(), t.device());
    copy(c, views::expand(t, shape));
    return c;
  };
  if (!oa.ok || sa < 0) {
    a = materialised(a);
    oa = as_operand(n, k, a.stride(r - 2), a.stride(r - 1));
    sa = batch_stride(a, out);
  }
  if (!ob.ok || sb < 0) {
    b = materialised(b);
    ob = as_operand(k, m, b.stride(r - 2), b.stride(r - 1));
    sb = batch_stride(b, out);
  }
  MT_INTERNAL_ASSERT(oa.ok && ob.ok && sa >= 0 && sb >= 0, "matmul: layout");
  const int64_t batch = out.numel() / (n * m);
  Problem p{ob, oa, m, n, k, batch, sb, sa, n * m};
  run_lt(out.device(), a.dtype(), out.dtype(), p, a.raw_data(), b.raw_data(), out.raw_data(),
         bias.defined() ? bias.raw_data() : nullptr, accumulate);
}

void matmul_cuda(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  matmul_lt(a, b, bias, out, false);
}

// t exactly in fp32 (t itself when it is fp32 or undefined).
Tensor widened_fp32(const Tensor& t) { return t.defined() ? converted(t, kFloat32) : t; }

// kernels/linalg.h's MatmulWideningFn: 16-bit a and b, fp32 out, straight from cuBLASLt's fp32
// accumulators (tensor cores; no widened copies). The bias is widened to fp32 (D's type).
void matmul_widening_cuda(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out, bool accumulate) {
  MT_INTERNAL_ASSERT((a.dtype() == kBFloat16 || a.dtype() == kFloat16) && b.dtype() == a.dtype() &&
                         out.dtype() == kFloat32 && (!bias.defined() || !accumulate),
                     "matmul_widening: unexpected operands ", describe(a), ", ", describe(b), ", ", describe(out));
  const Tensor bias32 = widened_fp32(bias);
  if (bias.defined() && a.size(-1) == 0) {  // no products: the bias alone, as the CPU's kernel gives it
    if (out.numel() != 0) copy(out, views::expand(bias32, out.shape()));
    return;
  }
  matmul_lt(a, b, bias32, out, accumulate);
}

// kernels/linalg.h's MatmulAccumulateFn: out += a @ b in one dtype (fp32 or fp64), beta = 1.
void matmul_accumulate_cuda(const Tensor& a, const Tensor& b, const Tensor& out) {
  matmul_lt(a, b, Tensor(), out, true);
}

// Mixed operand dtypes: 16-bit operands widened exactly to fp32, the fp32 product, one rounding.
void matmul_fp32_route_cuda(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  const auto widen = widened_fp32;
  if (out.dtype() == kFloat32) {
    matmul_cuda(widen(a), widen(b), widen(bias), out);
    return;
  }
  Tensor wide = Tensor::empty(out.shape(), kFloat32, out.device());
  matmul_cuda(widen(a), widen(b), widen(bias), wide);
  copy(out, wide);
}

// cuBLASLt multiplies bf16 and fp16 natively on every supported GPU: no fp32 route.
bool uses_fp32_route_cuda(DType) { return false; }

}  // namespace

void register_cuda_matmul(const Registry& r) {
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    r.set(matmul_table, d, &matmul_cuda);
    r.set(matmul_fp32_route_table, d, &matmul_fp32_route_cuda);
  }
  for (DType d : {kFloat16, kBFloat16}) r.set(matmul_widening_table, d, &matmul_widening_cuda);
  for (DType d : {kFloat32, kFloat64}) r.set(matmul_accumulate_table, d, &matmul_accumulate_cuda);
  for (int d = 0; d < kNumDTypes; ++d) r.set(uses_fp32_route_table, static_cast<DType>(d), &uses_fp32_route_cuda);
}

}  // namespace cuda
}  // namespace mixtrain::kernels
