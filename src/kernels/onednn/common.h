// Shared oneDNN plumbing: the CPU engine and stream, dtype mapping, scratchpads from the accounted
// allocator, and the bf16 compute path.
//
// One engine and one stream serve the whole process (created on first use). CPU streams with the
// OpenMP runtime execute synchronously in the calling thread, and every primitive here uses a
// user-provided scratchpad (a fresh buffer per call from mixtrain's caching allocator), so primitives
// can run from several threads at once and their scratch memory shows up in memory::stats().
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <unordered_map>

#include "mixtrain/tensor.h"

namespace mixtrain::kernels::onednn {

dnnl::engine& engine();
dnnl::stream& stream();

// f32 / bf16 / f16 (f64 and integers have no oneDNN kernels here).
dnnl::memory::data_type to_dnnl(DType dtype);

// Attributes every primitive is created with: user scratchpad (see above).
dnnl::primitive_attr base_attr();

// A memory object over a tensor's data (no copy).
inline dnnl::memory wrap(const dnnl::memory::desc& md, const Tensor& t) {
  return dnnl::memory(md, engine(), t.raw_data());
}

// Runs `prim` with `args`, adding a scratchpad of the size `pd` asks for.
void execute(const dnnl::primitive& prim, const dnnl::primitive_desc_base& pd,
             std::unordered_map<int, dnnl::memory>& args);

// True when oneDNN can use AMX tiles on this machine (the only CPU feature that makes bf16 GEMMs
// clearly faster than fp32 ones with oneDNN 2.6; see docs/performance.md).
bool cpu_has_amx();

// Converts a floating tensor to fp32 without autograd, keeping its memory order when it is a
// permutation of a contiguous layout (a transposed view stays transposed, so the conversion is a
// flat pass with the bulk converters instead of a strided gather).
Tensor to_fp32_same_layout(const Tensor& t);

}  // namespace mixtrain::kernels::onednn
