// Kernel tables of conv2d (front-end in src/ops/conv.cpp; kernels in src/backends/cpu/kernels/onednn/conv.cpp
// and src/backends/cpu/kernels/ref/conv_ref.cpp).
//
// Accumulation dtype: fp32 for fp32, bf16 and fp16; fp64 for fp64 (reference loops).
//   fp32  oneDNN convolution primitives
//   bf16  oneDNN bf16 primitives, or the fp32 route (see Bf16Path in kernels/linalg.h)
//   fp16  operands converted exactly to fp32, the fp32 primitive, one rounding (oneDNN 2.6 has no
//         f16 convolution on CPUs)
//   fp64  reference loops
// Weight and bias gradients are accumulated in fp32 and rounded once into the weight's dtype.
// Every tensor is contiguous: x and gx [N, C, H, W], w and gw [O, C/groups, kh, kw], y and gy
// [N, O, Ho, Wo], bias and gb [O]; all share one floating dtype.
#pragma once

#include <cstdint>

#include "kernels/dispatch.h"
#include "mixtrain/tensor.h"

namespace mixtrain::kernels {

struct Conv2dGeometry {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dil_h = 1, dil_w = 1;
  int64_t groups = 1;
};

// y = conv(x, w) + bias (bias optional).
using Conv2dForwardFn = void(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                             const Conv2dGeometry& g);
// Gradients given gy, in one pass over the batch (gy is converted and laid out once for both):
// gx with respect to x when gx is defined (w needed), gw and gb (when defined) with respect to w
// and bias when gw is defined (x needed). Undefined tensors are neither read nor written.
using Conv2dBackwardFn = void(const Tensor& gy, const Tensor& x, const Tensor& w, const Tensor& gx, const Tensor& gw,
                              const Tensor& gb, const Conv2dGeometry& g);

MT_KERNEL_TABLE(DispatchTable<Conv2dForwardFn>, conv2d_forward_table, "conv2d");
MT_KERNEL_TABLE(DispatchTable<Conv2dBackwardFn>, conv2d_backward_table, "conv2d backward");
inline const DispatchTable<Conv2dForwardFn>& conv2d_forward_kernel() { return conv2d_forward_table; }
inline const DispatchTable<Conv2dBackwardFn>& conv2d_backward_kernel() { return conv2d_backward_table; }

// The oneDNN implementations (forward, backward data, backward weights) a conv2d of these shapes
// runs in `dtype` (float32 or bfloat16, native), creating and caching the primitives. For tests.
std::string conv2d_impl_info(const Shape& x, const Shape& w, bool bias, const Conv2dGeometry& g, DType dtype);

// The oneDNN kernels run on chunks of the batch of about this many bytes of fp32 activations (the
// largest of x and y per image, times the images of a chunk), so that blocked-layout and widened
// fp32 copies stay chunk-sized. Backward-weights sums the chunks' gradients in fp32, in chunk order;
// the chunking depends on the shapes only, never on the thread count.
inline constexpr int64_t kConv2dDefaultChunkBytes = int64_t{1} << 20;
// Sets the chunk budget (<= 0: the whole batch at once) and returns the previous one. For tests and
// tuning; not thread-safe against convolutions running at the same time.
int64_t set_conv2d_chunk_bytes(int64_t bytes);

}  // namespace mixtrain::kernels
