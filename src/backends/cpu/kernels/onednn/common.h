// Shared oneDNN plumbing: the CPU engine and stream, dtype mapping, scratchpads from the accounted
// allocator, and the bf16 compute path.
//
// One engine and one stream serve the whole process (created on first use). CPU streams with the
// OpenMP runtime execute synchronously in the calling thread, and every primitive here uses a
// user-provided scratchpad (a fresh buffer per call from mixtrain's caching allocator), so primitives
// can run from several threads at once and their scratch memory shows up in memory::stats().
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <string>
#include <unordered_map>

#include "mixtrain/tensor.h"
#include "backends/cpu/kernels/host_ptr.h"

namespace mixtrain::kernels::onednn {

dnnl::engine& engine();
dnnl::stream& stream();

// f32 / bf16 / f16 (f64 and integers have no oneDNN kernels here).
dnnl::memory::data_type to_dnnl(DType dtype);

// Attributes every primitive is created with: user scratchpad (see above).
dnnl::primitive_attr base_attr();

// A memory object over a tensor's data (no copy).
inline dnnl::memory wrap(const dnnl::memory::desc& md, const Tensor& t) {
  return dnnl::memory(md, engine(), host_data(t));
}

// Runs `prim` with `args`, adding a scratchpad of the size `pd` asks for.
void execute(const dnnl::primitive& prim, const dnnl::primitive_desc_base& pd,
             std::unordered_map<int, dnnl::memory>& args);

// True when oneDNN may use AMX tiles here: oneDNN's effective level has them and so does
// cpu::isa() (mixtrain's ISA cap). One of the cases of kernels::native_bf16_is_faster.
bool cpu_has_amx();
// True when oneDNN's effective level (after the cap of mixtrain/cpu.h) includes `level`.
bool has_isa(dnnl::cpu_isa level);
// oneDNN's effective level ("avx2", "avx512_core_bf16", ...).
std::string effective_isa_name();

// Throws mt::Error for a primitive oneDNN could not create: names `what` (the op, dtypes, shapes),
// the CPU and its level, and oneDNN's message.
[[noreturn]] void rethrow_creation_error(const dnnl::error& e, const std::string& what);

// Converts a floating tensor to fp32 without autograd, keeping its memory order when it is a
// permutation of a contiguous layout (a transposed view stays transposed, so the conversion is a
// flat pass with the bulk converters instead of a strided gather).
Tensor to_fp32_same_layout(const Tensor& t);

}  // namespace mixtrain::kernels::onednn
