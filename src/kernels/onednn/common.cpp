// Shared oneDNN plumbing (see common.h) and the bf16 compute-path switch of kernels/linalg.h.
#include "kernels/onednn/common.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "kernels/copy.h"
#include "kernels/linalg.h"
#include "kernels/onednn/primitive_cache.h"

namespace mixtrain::kernels {
namespace onednn {

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

dnnl::memory::data_type to_dnnl(DType dtype) {
  switch (dtype) {
    case kFloat32: return dnnl::memory::data_type::f32;
    case kBFloat16: return dnnl::memory::data_type::bf16;
    case kFloat16: return dnnl::memory::data_type::f16;
    default: MT_INTERNAL_ASSERT(false, "no oneDNN data type for ", dtype);
  }
  return dnnl::memory::data_type::undef;
}

dnnl::primitive_attr base_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void execute(const dnnl::primitive& prim, const dnnl::primitive_desc_base& pd,
             std::unordered_map<int, dnnl::memory>& args) {
  dnnl::memory::desc sd = pd.scratchpad_desc();
  Tensor scratch;  // kept alive until the (synchronous) execution returns
  if (sd.get_size() > 0) {
    scratch = Tensor::empty({static_cast<int64_t>(sd.get_size())}, kUInt8);
    args[DNNL_ARG_SCRATCHPAD] = wrap(sd, scratch);
  }
  prim.execute(stream(), args);
  stream().wait();
}

bool cpu_has_amx() {
  auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  auto amx = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
  return (isa & amx) == amx;
}

CacheCounters& cache_counters() {
  static CacheCounters counters;
  return counters;
}

Tensor to_fp32_same_layout(const Tensor& t_in) {
  Tensor t = t_in.detach();
  if (t.dtype() == kFloat32) return t;
  if (t.is_contiguous()) return t.to(kFloat32);
  // Order dims by decreasing stride; if that permutation is contiguous, convert it flat.
  Shape perm = Shape::filled(t.dim(), 0);
  std::iota(perm.begin(), perm.end(), int64_t{0});
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t x, int64_t y) { return t.stride(x) > t.stride(y); });
  Tensor p = t.permute(perm);
  if (!p.is_contiguous()) return t.to(kFloat32);
  Shape inverse = Shape::filled(t.dim(), 0);
  for (int i = 0; i < t.dim(); ++i) inverse[perm[i]] = i;
  return p.to(kFloat32).permute(inverse);
}

}  // namespace onednn

namespace {

Bf16Path resolve_bf16_path() {
  if (const char* env = std::getenv("MIXTRAIN_BF16_PATH")) {
    if (std::strcmp(env, "native") == 0) return Bf16Path::kNative;
    if (std::strcmp(env, "fp32") == 0) return Bf16Path::kFp32;
  }
  return onednn::cpu_has_amx() ? Bf16Path::kNative : Bf16Path::kFp32;
}

std::atomic<int> g_bf16_path{-1};  // -1: not resolved yet

}  // namespace

bool uses_fp32_route(DType dtype) {
  return dtype == kFloat16 || (dtype == kBFloat16 && bf16_path() == Bf16Path::kFp32);
}

void set_bf16_path(Bf16Path path) {
  g_bf16_path.store(path == Bf16Path::kAuto ? static_cast<int>(resolve_bf16_path()) : static_cast<int>(path));
}

Bf16Path bf16_path() {
  int p = g_bf16_path.load(std::memory_order_relaxed);
  if (p < 0) {
    p = static_cast<int>(resolve_bf16_path());
    g_bf16_path.store(p);
  }
  return static_cast<Bf16Path>(p);
}

PrimitiveCacheStats primitive_cache_stats() {
  auto& c = onednn::cache_counters();
  return {c.created.load(), c.hits.load()};
}

}  // namespace mixtrain::kernels
