// MT_HOST_DEVICE: a function that the CPU kernels and the CUDA kernels both call, compiled for the
// host and (under nvcc) for the device from one definition. Headers that hold what both devices must
// compute identically (float_to_int.h, loss_formulas.h, optim_formulas.h) mark their functions with it.
#pragma once

#if defined(__CUDACC__)
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif
