// The README's example: tensors, a bf16 computation on fp32 weights, and autograd.
#include <mixtrain/mixtrain.h>

#include <iostream>
#include <vector>

namespace mt = mixtrain;

int main() {
  mt::manual_seed(0);
  mt::Tensor w = mt::randn({3, 4}).requires_grad_();  // an fp32 parameter
  mt::Tensor x = mt::from_vector(std::vector<float>{1, 2, 3, 4}, {1, 4});

  // Run the matmul in bf16: 16-bit operands, fp32 accumulation inside the kernel.
  mt::Tensor y = mt::linear(x.to(mt::kBFloat16), w.to(mt::kBFloat16));  // [1, 3] bfloat16
  mt::Tensor loss = mt::sum(y.to(mt::kFloat32));
  loss.backward();

  std::cout << y << "\n";
  std::cout << w.grad() << "\n";  // float32, like w: the cast's backward converts it back
  std::cout << "peak tensor memory: " << mt::memory::stats().peak_bytes << " bytes\n";
}
