// Uses the installed mixtrain: creates a tensor, converts it to bf16 and checks the values.
#include <mixtrain/mixtrain.h>

#include <iostream>
#include <vector>

namespace mt = mixtrain;

int main() {
  try {
    mt::Tensor x = mt::from_vector(std::vector<float>{1.0f, 0.5f, -2.0f, 1.0f + 1.0f / 256}, {2, 2});
    mt::Tensor y = x.to(mt::kBFloat16);
    // 1 + 2^-8 lies halfway between two bf16 values and rounds to the even one, 1.
    const std::vector<float> expected{1.0f, 0.5f, -2.0f, 1.0f};
    if (y.dtype() != mt::kBFloat16 || y.to_vector<float>() != expected) {
      std::cerr << "unexpected result: " << y << "\n";
      return 1;
    }
    std::cout << y << "\nOK\n";
    return 0;
  } catch (const mt::Error& e) {
    std::cerr << "mt::Error: " << e.what() << "\n";
    return 1;
  }
}
