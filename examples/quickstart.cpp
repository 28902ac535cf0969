// The README's example: a small classifier trained with fp16 autocast and a GradScaler.
#include <mixtrain/mixtrain.h>

#include <iostream>

namespace mt = mixtrain;
namespace F = mt::nn::functional;

int main() {
  mt::manual_seed(0);
  // 512 examples of 20 features; the labels come from a random linear teacher (4 classes).
  mt::Tensor x = mt::randn({512, 20});
  mt::Tensor y = mt::argmax(mt::matmul(x, mt::randn({20, 4})), 1);

  mt::nn::Sequential model(mt::nn::Linear(20, 64), mt::nn::ReLU(), mt::nn::Linear(64, 4));
  mt::optim::AdamW opt(model.parameters(), {.lr = 1e-2});  // fp32 weights and moments
  mt::amp::GradScaler scaler;  // PyTorch's defaults: scale 65536, x2 every 2000 clean steps

  for (int step = 0; step <= 200; ++step) {
    opt.zero_grad();
    mt::Tensor loss;
    {
      mt::amp::Autocast autocast(mt::kCPU, mt::kFloat16);  // linear in fp16, the loss in fp32
      loss = F::cross_entropy(model(x), y);
    }
    scaler.scale(loss).backward();  // backward outside the region; fp32 parameters get fp32 grads
    scaler.step(opt);               // unscales; skips the update if a gradient is inf/NaN
    scaler.update();
    if (step % 50 == 0) std::cout << "step " << step << "  loss " << loss.item<float>() << "\n";
  }
  std::cout << "peak tensor memory: " << mt::memory::stats().peak_bytes << " bytes\n";
}
