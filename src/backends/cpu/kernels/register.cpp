#include "backends/cpu/kernels/register.h"

namespace mixtrain::kernels {

void register_cpu(Registry& registry) {
  register_cpu_copy(registry);
  register_cpu_round_through(registry);
  register_cpu_random(registry);
  register_cpu_unary(registry);
  register_cpu_binary(registry);
  register_cpu_reduce(registry);
  register_cpu_shape_ops(registry);
  register_cpu_linalg_sum(registry);
  register_cpu_softmax(registry);
  register_cpu_attention(registry);
  register_cpu_layer_norm(registry);
  register_cpu_pool(registry);
  register_cpu_dropout(registry);
  register_cpu_batch_norm(registry);
  register_cpu_class_loss(registry);
  register_cpu_pointwise_loss(registry);
  register_cpu_optim(registry);
  register_cpu_amp(registry);
  register_cpu_fp8(registry);
  register_onednn_matmul(registry);
  register_onednn_conv(registry);
}

}  // namespace mixtrain::kernels
