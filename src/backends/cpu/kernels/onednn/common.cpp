// Shared oneDNN plumbing (see common.h) and the bf16 compute-path switch of kernels/linalg.h.
#include "backends/cpu/kernels/onednn/common.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string_view>

#include "core/views.h"
#include "kernels/copy.h"
#include "kernels/linalg.h"
#include "backends/cpu/kernels/onednn/primitive_cache.h"
#include "mixtrain/cpu.h"

namespace mixtrain::kernels {
namespace onednn {

namespace {

// oneDNN's level for each cpu::Isa (mixtrain/cpu.h). oneDNN has no level below SSE4.1.
dnnl::cpu_isa to_dnnl_isa(cpu::Isa isa) {
  switch (isa) {
    case cpu::Isa::kGeneric: return dnnl::cpu_isa::sse41;
    case cpu::Isa::kAvx2: return dnnl::cpu_isa::avx2;
    case cpu::Isa::kAvx512: return dnnl::cpu_isa::avx512_core;
    case cpu::Isa::kAvx512Bf16: return dnnl::cpu_isa::avx512_core_bf16;
    case cpu::Isa::kAmx: return dnnl::cpu_isa::all;
  }
  return dnnl::cpu_isa::all;
}

// Sets oneDNN's cap to mixtrain's before oneDNN generates any code. Left alone when no cap is set,
// so that DNNL_MAX_CPU_ISA still works on its own. oneDNN refuses the call once it has read its
// cap (another library in the process used it first); the level then stays oneDNN's, and the bf16
// path decisions below take oneDNN's effective level into account.
void apply_isa_cap() {
  if (cpu::max_isa_is_set()) (void)dnnl::set_max_cpu_isa(to_dnnl_isa(cpu::max_isa()));
}

}  // namespace

dnnl::engine& engine() {
  static dnnl::engine eng = [] {
    apply_isa_cap();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
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

bool has_isa(dnnl::cpu_isa level) {
  engine();  // the cap is applied before oneDNN first reads it
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto want = static_cast<unsigned>(level);
  return (isa & want) == want;
}

bool cpu_has_amx() { return has_isa(dnnl::cpu_isa::avx512_core_amx) && cpu::isa() >= cpu::Isa::kAmx; }

std::string effective_isa_name() {
  engine();
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "unknown";
  }
}

[[noreturn]] void rethrow_creation_error(const dnnl::error& e, const std::string& what) {
  MT_FAIL(what, ": oneDNN cannot create a primitive for it on this CPU (", cpu::describe(), "; oneDNN level ",
          effective_isa_name(), "): ", e.what());
}

CacheCounters& cache_counters() {
  static CacheCounters counters;
  return counters;
}

Tensor to_fp32_same_layout(const Tensor& t_in) {
  Tensor t = t_in.detach();
  if (t.dtype() == kFloat32) return t;
  if (t.is_contiguous()) return converted(t, kFloat32);
  // Order dims by decreasing stride; if that permutation is contiguous, convert it flat.
  Shape perm = Shape::filled(t.dim(), 0);
  std::iota(perm.begin(), perm.end(), int64_t{0});
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t x, int64_t y) { return t.stride(x) > t.stride(y); });
  Tensor p = views::permute(t, perm);
  if (!p.is_contiguous()) return converted(t, kFloat32);
  Shape inverse = Shape::filled(t.dim(), 0);
  for (int i = 0; i < t.dim(); ++i) inverse[perm[i]] = i;
  return views::permute(converted(p, kFloat32), inverse);
}

}  // namespace onednn

namespace {

constexpr const char* kPathEnv = "MIXTRAIN_BF16_PATH";

// What MIXTRAIN_BF16_PATH asks for, read once: kAuto when unset, an error message when invalid.
struct EnvPath {
  Bf16Path path = Bf16Path::kAuto;
  std::string error;
};

const EnvPath& env_path() {
  static const EnvPath e = [] {
    EnvPath r;
    const char* env = std::getenv(kPathEnv);
    if (env == nullptr) return r;
    const std::string_view v(env);
    if (v == "native") {
      r.path = Bf16Path::kNative;
    } else if (v == "fp32") {
      r.path = Bf16Path::kFp32;
    } else if (v != "auto") {
      r.error = detail::concat(kPathEnv, "=", detail::quote_untrusted(v),
                               " is not a bf16 compute path; accepted values: native, fp32, auto");
    }
    return r;
  }();
  return e;
}

// The pinned path: kAuto (follow MIXTRAIN_BF16_PATH, else choose), kNative or kFp32 from set_bf16_path.
std::atomic<Bf16Path> g_api_path{Bf16Path::kAuto};

// Whether oneDNN can build a bf16 matmul here at all (oneDNN 2.6 has bf16 kernels only from
// avx512_core up, and no reference fallback below it). Asked once: oneDNN's level is fixed once read.
bool onednn_builds_bf16() {
  static const bool ok = [] {
    using dnnl::memory;
    const memory::desc md({16, 16}, memory::data_type::bf16, memory::format_tag::ab);
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), onednn::engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

}  // namespace

std::string native_bf16_unavailable_reason() {
  if (cpu::isa() < cpu::Isa::kAvx512)
    return detail::concat("oneDNN's bf16 matmul and convolution kernels need AVX-512 (avx512_core), and the "
                          "instruction-set level here is ", cpu::to_string(cpu::isa()), " (", cpu::describe(), ")");
  if (!onednn_builds_bf16())
    return detail::concat("oneDNN builds no bf16 matmul at its level ", onednn::effective_isa_name(), " (",
                          cpu::describe(), ")");
  return {};
}

void require_bf16_path_runs(const char* op) {
  if (bf16_path() != Bf16Path::kNative) return;
  const std::string why = native_bf16_unavailable_reason();
  if (why.empty()) return;
  const bool from_api = g_api_path.load() == Bf16Path::kNative;
  MT_FAIL(op, " (bfloat16): the bf16 compute path is pinned to native (",
          from_api ? "kernels::set_bf16_path(Bf16Path::kNative)" : "MIXTRAIN_BF16_PATH=native", "), but ", why,
          ". Unset ", from_api ? "the pin" : "MIXTRAIN_BF16_PATH", " or choose fp32 (the exact fp32 route, same "
          "numerics).");
}

bool native_bf16_is_faster() {
  if (onednn::cpu_has_amx()) return true;
  // AVX512-BF16 without AMX: only AMD's cores issue vdpbf16ps at the fp32 FMA rate (linalg.h).
  return cpu::features().amd && cpu::isa() >= cpu::Isa::kAvx512Bf16 &&
         onednn::has_isa(dnnl::cpu_isa::avx512_core_bf16);
}

bool uses_fp32_route(DType dtype) {
  return dtype == kFloat16 || (dtype == kBFloat16 && bf16_path() == Bf16Path::kFp32);
}

void set_bf16_path(Bf16Path path) { g_api_path.store(path); }

Bf16Path bf16_path() {
  const Bf16Path pinned = g_api_path.load(std::memory_order_relaxed);
  if (pinned != Bf16Path::kAuto) return pinned;
  const EnvPath& env = env_path();
  if (!env.error.empty()) throw Error(env.error);
  if (env.path != Bf16Path::kAuto) return env.path;
  // Automatic: native only where it is faster than the fp32 route (see linalg.h).
  return native_bf16_is_faster() ? Bf16Path::kNative : Bf16Path::kFp32;
}

PrimitiveCacheStats primitive_cache_stats() {
  auto& c = onednn::cache_counters();
  return {c.created.load(), c.hits.load()};
}

}  // namespace mixtrain::kernels
