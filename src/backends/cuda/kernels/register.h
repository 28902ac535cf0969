// The CUDA backend's kernel registration (built only with MIXTRAIN_CUDA): register_cuda fills the
// CUDA slots of the registry; each kernel file contributes one register_cuda_<family> (conv2d's only
// in builds with cuDNN: MIXTRAIN_WITH_CUDNN). Tables without a CUDA kernel answer "<op>: no kernel
// for dtype ... on device cuda:0" (docs/cuda.md lists what runs on the GPU).
#pragma once

#include "kernels/dispatch.h"

namespace mixtrain::kernels {

void register_cuda(Registry& registry);

namespace cuda {
void register_cuda_copy(const Registry& r);
void register_cuda_elementwise(const Registry& r);
void register_cuda_reduce(const Registry& r);
void register_cuda_optim(const Registry& r);
void register_cuda_matmul(const Registry& r);
void register_cuda_softmax(const Registry& r);
void register_cuda_layer_norm(const Registry& r);
void register_cuda_dropout(const Registry& r);
void register_cuda_pool(const Registry& r);
void register_cuda_loss(const Registry& r);
void register_cuda_batch_norm(const Registry& r);
void register_cuda_shape_ops(const Registry& r);
void register_cuda_attention(const Registry& r);
#if MIXTRAIN_WITH_CUDNN
void register_cuda_conv(const Registry& r);  // conv_cudnn.cpp: only in builds with cuDNN (cmake/Cudnn.cmake)
#endif
}  // namespace cuda

}  // namespace mixtrain::kernels
