// cuBLASLt on the host (include/cublasLt.h): descriptors as plain structs, a heuristic that records
// the alignments it was asked for, and a reference matmul that validates every argument first.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/host/device_memory.h"
#include "mixtrain/error.h"

struct cublasLtContext {
  int magic = 0x4c74;
};
struct cublasLtMatmulDescOpaque {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  cudaDataType_t bias_type = CUDA_R_32F;
  bool bias_type_set = false;
};
struct cublasLtMatrixLayoutOpaque {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};
struct cublasLtMatmulPreferenceOpaque {
  uint64_t workspace = 0;
  uint32_t reduction_mask = 0xffffffffu;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D; cuBLASLt's default is 256
};

namespace {

thread_local std::string g_last_error;

cublasStatus_t fail(cublasStatus_t status, std::string why) {
  g_last_error = std::move(why);
  return status;
}
cublasStatus_t ok() {
  g_last_error.clear();
  return CUBLAS_STATUS_SUCCESS;
}

size_t element_bytes(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_64F: return 8;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
  }
  return 0;
}

template <typename T>
bool read_attribute(const void* buf, size_t bytes, T* out) {
  if (buf == nullptr || bytes != sizeof(T)) return false;
  std::memcpy(out, buf, sizeof(T));
  return true;
}

double load(cudaDataType_t t, const void* base, int64_t index) {
  switch (t) {
    case CUDA_R_32F: return static_cast<const float*>(base)[index];
    case CUDA_R_64F: return static_cast<const double*>(base)[index];
    case CUDA_R_16F: return __half2float(static_cast<const __half*>(base)[index]);
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
  }
  return 0;
}
void store(cudaDataType_t t, void* base, int64_t index, double v) {
  switch (t) {
    case CUDA_R_32F: static_cast<float*>(base)[index] = static_cast<float>(v); return;
    case CUDA_R_64F: static_cast<double*>(base)[index] = v; return;
    case CUDA_R_16F: static_cast<__half*>(base)[index] = __float2half_rn(static_cast<float>(v)); return;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16_rn(static_cast<float>(v)); return;
  }
}

// The documented argument rules of one matmul; "" when they hold.
std::string validate(const cublasLtMatmulDescOpaque& d, const cublasLtMatrixLayoutOpaque& a,
                     const cublasLtMatrixLayoutOpaque& b, const cublasLtMatrixLayoutOpaque& c,
                     const cublasLtMatrixLayoutOpaque& out) {
  using mixtrain::detail::concat;
  const uint64_t m = d.transa == CUBLAS_OP_N ? a.rows : a.cols, k = d.transa == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t kb = d.transb == CUBLAS_OP_N ? b.rows : b.cols, n = d.transb == CUBLAS_OP_N ? b.cols : b.rows;
  if (k != kb) return concat("op(A) is ", m, "x", k, " but op(B) is ", kb, "x", n, ": the inner dimensions differ");
  if (c.rows != m || c.cols != n || out.rows != m || out.cols != n)
    return concat("C is ", c.rows, "x", c.cols, " and D ", out.rows, "x", out.cols, ", op(A) op(B) is ", m, "x", n);
  if (a.batch != b.batch || a.batch != c.batch || a.batch != out.batch)
    return concat("batch counts differ: A ", a.batch, ", B ", b.batch, ", C ", c.batch, ", D ", out.batch);
  // cuBLASLt's table of type combinations, the part the backend uses: one type throughout, or 16-bit
  // A and B (both R_16F or both R_16BF) with R_32F C and D under CUBLAS_COMPUTE_32F.
  const bool half_in = a.type == CUDA_R_16F || a.type == CUDA_R_16BF;
  const bool widening = half_in && c.type == CUDA_R_32F && d.compute == CUBLAS_COMPUTE_32F;
  if (a.type != b.type || c.type != out.type || (a.type != c.type && !widening))
    return "A and B must share a data type, and C and D theirs: all one type, or 16-bit A and B with R_32F C and D "
           "under CUBLAS_COMPUTE_32F (the backend's combinations)";
  const bool f64 = d.compute == CUBLAS_COMPUTE_64F;
  if (f64 != (a.type == CUDA_R_64F)) return "CUBLAS_COMPUTE_64F goes with CUDA_R_64F matrices, and only with them";
  if (d.scale != (f64 ? CUDA_R_64F : CUDA_R_32F)) return "the scale type must be the compute type's (R_32F or R_64F)";
  if (d.compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a.type != CUDA_R_32F) return "FAST_TF32 needs CUDA_R_32F matrices";
  if (d.epilogue == CUBLASLT_EPILOGUE_BIAS) {
    if (d.bias == nullptr) return "the BIAS epilogue has no CUBLASLT_MATMUL_DESC_BIAS_POINTER";
    if (d.bias_type_set && d.bias_type != out.type) return "the bias data type must be D's here";
  }
  if (c.ld != out.ld || c.stride != out.stride) return "C and D must share a layout (the backend writes in place)";
  return "";
}

}  // namespace

const char* cublas_host_last_error() { return g_last_error.c_str(); }
size_t cublasLtGetVersion() { return 130000; }

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate: null handle pointer");
  *handle = new cublasLtContext;
  return ok();
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return ok();
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  if (desc == nullptr) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate: null pointer");
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32 && compute != CUBLAS_COMPUTE_64F)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulDescCreate: a compute type the host does not model");
  *desc = new cublasLtMatmulDescOpaque{compute, scale};
  return ok();
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return ok();
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
  if (d == nullptr) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "matmul descriptor: null");
  bool good = false;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: good = read_attribute(buf, bytes, &d->transa); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: good = read_attribute(buf, bytes, &d->transb); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: good = read_attribute(buf, bytes, &d->epilogue); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: good = read_attribute(buf, bytes, &d->bias); break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: good = d->bias_type_set = read_attribute(buf, bytes, &d->bias_type); break;
  }
  if (!good) return fail(CUBLAS_STATUS_INVALID_VALUE, "matmul descriptor: an attribute's buffer has the wrong size");
  if ((d->transa != CUBLAS_OP_N && d->transa != CUBLAS_OP_T) || (d->transb != CUBLAS_OP_N && d->transb != CUBLAS_OP_T))
    return fail(CUBLAS_STATUS_INVALID_VALUE, "matmul descriptor: transa/transb must be CUBLAS_OP_N or CUBLAS_OP_T");
  return ok();
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (layout == nullptr) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate: null pointer");
  if (element_bytes(type) == 0) return fail(CUBLAS_STATUS_NOT_SUPPORTED, "matrix layout: a data type the host lacks");
  // Column-major: a column of `rows` elements must fit in the leading dimension.
  if (ld < 1 || static_cast<uint64_t>(ld) < rows)
    return fail(CUBLAS_STATUS_INVALID_VALUE, mixtrain::detail::concat("matrix layout ", rows, "x", cols,
                                                                      ": leading dimension ", ld, " < rows"));
  *layout = new cublasLtMatrixLayoutOpaque{type, rows, cols, ld};
  return ok();
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return ok();
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t bytes) {
  if (l == nullptr) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "matrix layout: null");
  if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) {
    if (!read_attribute(buf, bytes, &l->batch) || l->batch < 1)
      return fail(CUBLAS_STATUS_INVALID_VALUE, "matrix layout: the batch count must be an int32 >= 1");
    return ok();
  }
  if (attr == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET) {
    if (!read_attribute(buf, bytes, &l->stride))
      return fail(CUBLAS_STATUS_INVALID_VALUE, "matrix layout: the batch stride must be an int64");
    return ok();
  }
  return fail(CUBLAS_STATUS_INVALID_VALUE, "matrix layout: an attribute the host does not model");
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate: null pointer");
  *pref = new cublasLtMatmulPreferenceOpaque;
  return ok();
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return ok();
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes) {
  if (p == nullptr) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "preference: null");
  bool good = false;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: good = read_attribute(buf, bytes, &p->workspace); break;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: good = read_attribute(buf, bytes, &p->reduction_mask); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: good = read_attribute(buf, bytes, &p->align[0]); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: good = read_attribute(buf, bytes, &p->align[1]); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: good = read_attribute(buf, bytes, &p->align[2]); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: good = read_attribute(buf, bytes, &p->align[3]); break;
  }
  if (!good) return fail(CUBLAS_STATUS_INVALID_VALUE, "preference: an attribute's buffer has the wrong size");
  return ok();
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* found) {
  if (handle == nullptr || desc == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr ||
      pref == nullptr || results == nullptr || found == nullptr || requested < 1)
    return fail(CUBLAS_STATUS_INVALID_VALUE, "heuristic: a null argument or requested < 1");
  if (const std::string why = validate(*desc, *a, *b, *c, *d); !why.empty())
    return fail(CUBLAS_STATUS_INVALID_VALUE, "heuristic: " + why);
  // The algorithm remembers what it was chosen for: the alignments (a GPU kernel vectorised for them
  // faults on less) and the workspace it may use (none here).
  results[0] = cublasLtMatmulHeuristicResult_t{};
  for (int i = 0; i < 4; ++i) results[0].algo.data[i] = pref->align[i];
  results[0].algo.data[7] = 0x484f5354;  // "HOST": made by this heuristic
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *found = 1;
  return ok();
}

namespace {

struct Operands {
  const cublasLtMatmulDescOpaque* desc;
  const cublasLtMatrixLayoutOpaque *a, *b, *c, *d;
  const void *A, *B, *C;
  void* D;
  uint64_t m, n, k;
  double alpha, beta;
};

// D = alpha op(A) op(B) (+ beta C) (+ bias), column-major, per batch. Each output accumulates its k
// products in the compute type Acc, k ascending, from 0 -- the order a GPU's split-free kernel would
// not promise but a reference can -- then alpha, beta C and the bias in Acc, rounded once into D's
// type. op(A) and op(B) are widened into Acc once per batch (exact for every storage type here), so
// the inner loop runs over a row of op(B) with one accumulator per output column.
template <typename Acc>
void reference_matmul(const Operands& o) {
  const auto& dd = *o.desc;
  const auto *a = o.a, *b = o.b, *c = o.c, *d = o.d;
  const uint64_t m = o.m, n = o.n, k = o.k;
  std::vector<Acc> op_a(m * k), op_b(k * n), acc(n);
  const bool bias = dd.epilogue == CUBLASLT_EPILOGUE_BIAS;
  for (int32_t batch = 0; batch < d->batch; ++batch) {
    for (uint64_t i = 0; i < m; ++i)
      for (uint64_t kk = 0; kk < k; ++kk)
        op_a[i * k + kk] = static_cast<Acc>(load(
            a->type, o.A, batch * a->stride + static_cast<int64_t>(dd.transa == CUBLAS_OP_N ? i + kk * a->ld : kk + i * a->ld)));
    for (uint64_t kk = 0; kk < k; ++kk)
      for (uint64_t j = 0; j < n; ++j)
        op_b[kk * n + j] = static_cast<Acc>(load(
            b->type, o.B, batch * b->stride + static_cast<int64_t>(dd.transb == CUBLAS_OP_N ? kk + j * b->ld : j + kk * b->ld)));
    for (uint64_t i = 0; i < m; ++i) {
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (uint64_t kk = 0; kk < k; ++kk) {
        const Acc x = op_a[i * k + kk];
        const Acc* row = &op_b[kk * n];
        for (uint64_t j = 0; j < n; ++j) acc[j] += x * row[j];
      }
      for (uint64_t j = 0; j < n; ++j) {
        const int64_t ic = batch * d->stride + static_cast<int64_t>(i + j * d->ld);
        Acc v = static_cast<Acc>(o.alpha) * acc[j];
        if (o.beta != 0) v += static_cast<Acc>(o.beta) * static_cast<Acc>(load(c->type, o.C, ic));
        if (bias) v += static_cast<Acc>(load(d->type, dd.bias, static_cast<int64_t>(i)));
        store(d->type, o.D, ic, v);
      }
    }
  }
}

}  // namespace

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t) {
  using mixtrain::detail::concat;
  const mixtrain::cuda_host::DeviceAccess access;  // the library reads and writes device memory
  if (handle == nullptr || desc == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr ||
      alpha == nullptr || beta == nullptr || A == nullptr || B == nullptr || D == nullptr)
    return fail(CUBLAS_STATUS_INVALID_VALUE, "matmul: a null argument");
  if (const std::string why = validate(*desc, *a, *b, *c, *d); !why.empty())
    return fail(CUBLAS_STATUS_INVALID_VALUE, "matmul: " + why);
  if (algo == nullptr || algo->data[7] != 0x484f5354)
    return fail(CUBLAS_STATUS_INVALID_VALUE, "matmul: the algorithm does not come from cublasLtMatmulAlgoGetHeuristic");
  if (workspace_bytes > 0 && workspace == nullptr) return fail(CUBLAS_STATUS_INVALID_VALUE, "matmul: null workspace");
  const void* ptrs[4] = {A, B, C == nullptr ? D : C, D};
  const cublasLtMatrixLayoutOpaque* layouts[4] = {a, b, c, d};
  for (int i = 0; i < 4; ++i) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(ptrs[i]);
    const size_t elem = element_bytes(layouts[i]->type);
    if (p % elem != 0 || p % algo->data[i] != 0)
      return fail(CUBLAS_STATUS_INVALID_VALUE,
                  concat("matmul: ", "ABCD"[i], " at 0x", std::hex, p, std::dec, " is not aligned to the ",
                         algo->data[i], " bytes the algorithm was chosen for (a GPU kernel would fault)"));
  }
  const auto& dd = *desc;
  const uint64_t m = d->rows, n = d->cols, k = dd.transa == CUBLAS_OP_N ? a->cols : a->rows;
  const bool f64 = dd.compute == CUBLAS_COMPUTE_64F;
  const double al = f64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  const double be = f64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  const Operands ops{&dd, a, b, c, d, A, B, C, D, m, n, k, al, be};
  if (f64) reference_matmul<double>(ops);
  else reference_matmul<float>(ops);
  return ok();
}
