// src/backends/cpu/kernels/adam.h (internal): the CPU AdamW step of one chunk [b, e) of one
// parameter, in three implementations that give the same bits: the portable block path (adam.cpp),
// AVX-512 (adam_avx512.cpp: round-to-nearest stores, fp32 second moment) and AVX2 (adam_avx2.cpp:
// every layout, stochastic rounding and Kahan included). optim_kernels.cpp picks one per chunk by
// cpu::isa(). T is the parameter's storage type (float, float16, bfloat16); each entry point finds
// the moments' storage types (float or bfloat16) from the tensors.
#pragma once

#include <cstdint>

#include "kernels/optim.h"
#include "kernels/optim_formulas.h"
#include "mixtrain/half.h"

namespace mixtrain::kernels::adam {

// The fp32 scalars of one Adam step of one parameter. Host scalars in double (Python floats in
// PyTorch), rounded to fp32 where the tensor op would.
// Adam's constants for one parameter's update (kernels/optim_formulas.h, shared with the CUDA kernel).
struct AdamScalars : AdamConstants, AdamBiasCorrection {};

AdamScalars adam_scalars(const AdamHyper& h, int64_t t);

// 32 random bits for each element [s, s + n) of the parameter with stream id `stream`
// (kernels/optim.h, rounding_key): the low half rounds the parameter, the high half the second
// moment. With `avx2`, whole groups of 8 blocks come from an 8-lane Philox (the same bits).
void rounding_bits(uint64_t key, uint32_t stream, int64_t s, int64_t n, uint32_t* out, bool avx2);

// The portable path; `philox_avx2` lets its random bits come from the AVX2 Philox.
template <typename T>
void step_portable(const AdamTensors& t, const AdamScalars& c, const AdamHyper& h, int64_t b, int64_t e,
                   bool philox_avx2);
// The AVX-512 path (cpu::isa() >= kAvx512): round-to-nearest stores and an fp32 second moment only.
template <typename T>
void step_avx512(const AdamTensors& t, const AdamScalars& c, int64_t b, int64_t e);
// The AVX2 path (cpu::isa() >= kAvx2): every layout.
template <typename T>
void step_avx2(const AdamTensors& t, const AdamScalars& c, const AdamHyper& h, int64_t b, int64_t e);

// Instantiated in their files for the three parameter types.
#define MT_ADAM_INSTANCES(X) X(float) X(float16) X(bfloat16)
#define MT_ADAM_DECLARE_PORTABLE(T) \
  extern template void step_portable<T>(const AdamTensors&, const AdamScalars&, const AdamHyper&, int64_t, int64_t, bool);
#define MT_ADAM_DECLARE_AVX512(T) \
  extern template void step_avx512<T>(const AdamTensors&, const AdamScalars&, int64_t, int64_t);
#define MT_ADAM_DECLARE_AVX2(T) \
  extern template void step_avx2<T>(const AdamTensors&, const AdamScalars&, const AdamHyper&, int64_t, int64_t);
MT_ADAM_INSTANCES(MT_ADAM_DECLARE_PORTABLE)
MT_ADAM_INSTANCES(MT_ADAM_DECLARE_AVX512)
MT_ADAM_INSTANCES(MT_ADAM_DECLARE_AVX2)

}  // namespace mixtrain::kernels::adam
