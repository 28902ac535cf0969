// Every CUDA kernel family, registered in one place.
#include "backends/cuda/kernels/register.h"

namespace mixtrain::kernels {

void register_cuda(Registry& registry) {
  MT_INTERNAL_ASSERT(registry.device() == kCUDA, "register_cuda: wrong registry");
  cuda::register_cuda_copy(registry);
  cuda::register_cuda_elementwise(registry);
  cuda::register_cuda_reduce(registry);
  cuda::register_cuda_optim(registry);
  cuda::register_cuda_matmul(registry);
  cuda::register_cuda_softmax(registry);
  cuda::register_cuda_layer_norm(registry);
  cuda::register_cuda_dropout(registry);
  cuda::register_cuda_pool(registry);
  cuda::register_cuda_loss(registry);
  cuda::register_cuda_batch_norm(registry);
  cuda::register_cuda_shape_ops(registry);
  cuda::register_cuda_attention(registry);
#if MIXTRAIN_WITH_CUDNN
  cuda::register_cuda_conv(registry);
#endif
}

}  // namespace mixtrain::kernels
