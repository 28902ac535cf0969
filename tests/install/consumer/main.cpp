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
    // The tokenizer links PCRE2 through the package (mixtrain::pcre2); a missing file is an mt::Error.
    try {
      (void)mt::text::Tokenizer::load("/nonexistent/gpt2.tiktoken");
      std::cerr << "Tokenizer::load of a missing file did not throw\n";
      return 1;
    } catch (const mt::Error&) {
    }
    std::cout << y << "\nOK\n";
    return 0;
  } catch (const mt::Error& e) {
    std::cerr << "mt::Error: " << e.what() << "\n";
    return 1;
  }
}
