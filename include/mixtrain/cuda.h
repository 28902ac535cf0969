// mixtrain/cuda.h: the CUDA backend as users see it (docs/cuda.md). Tensors on a GPU are made
// with Device(kCUDA, index); everything here also works in builds without CUDA, where
// is_available() is false and unavailable_reason() says why.
#pragma once

#include <string>

namespace mixtrain::cuda {

// True when this build has the CUDA backend and the driver reports at least one GPU.
bool is_available();
int device_count();
// Why is_available() is false (no CUDA backend in this build, no driver, no GPU); empty when true.
std::string unavailable_reason();

// Whether fp32 matmuls may run on TF32 tensor cores (10-bit mantissa products, fp32 accumulation:
// ~3e-4 relative error instead of ~1e-6, several times faster). Off by default, as in PyTorch
// since 1.12: an fp32 baseline must be fp32. The environment variable MIXTRAIN_ALLOW_TF32=1 turns
// it on at start; set_allow_tf32 overrides it. 16-bit matmuls are unaffected.
void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace mixtrain::cuda
