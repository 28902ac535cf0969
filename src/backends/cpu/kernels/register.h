// The CPU backend's kernel registration: register_cpu fills every CPU slot of the registry. Each
// kernel file contributes one register_cpu_<family> function, defined next to its kernels.
#pragma once

#include "kernels/dispatch.h"

namespace mixtrain::kernels {

void register_cpu(Registry& registry);

void register_cpu_copy(const Registry& r);
void register_cpu_round_through(const Registry& r);
void register_cpu_random(const Registry& r);
void register_cpu_unary(const Registry& r);
void register_cpu_binary(const Registry& r);
void register_cpu_reduce(const Registry& r);
void register_cpu_shape_ops(const Registry& r);
void register_cpu_linalg_sum(const Registry& r);
void register_cpu_softmax(const Registry& r);
void register_cpu_attention(const Registry& r);
void register_cpu_layer_norm(const Registry& r);
void register_cpu_pool(const Registry& r);
void register_cpu_dropout(const Registry& r);
void register_cpu_batch_norm(const Registry& r);
void register_cpu_class_loss(const Registry& r);
void register_cpu_pointwise_loss(const Registry& r);
void register_cpu_optim(const Registry& r);
void register_cpu_amp(const Registry& r);
void register_cpu_fp8(const Registry& r);
void register_onednn_matmul(const Registry& r);
void register_onednn_conv(const Registry& r);

}  // namespace mixtrain::kernels
