// Uses the installed mixtrain: creates a tensor, converts it to bf16 and checks the values; loads a
// missing tokenizer file (PCRE2); writes and reads back a TensorBoard event file (protobuf).
#include <mixtrain/mixtrain.h>
#include <stdlib.h>

#include <filesystem>
#include <iostream>
#include <string>
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
    // The event file writer encodes with protobuf, linked through the package (mixtrain::protobuf).
    std::string dir = (std::filesystem::temp_directory_path() / "mixtrain_consumer_XXXXXX").string();
    if (::mkdtemp(dir.data()) == nullptr) {
      std::cerr << "mkdtemp failed\n";
      return 1;
    }
    std::string event_path;
    {
      mt::io::EventFileWriter writer(dir);
      writer.add_scalars(3, {{"train/loss", 0.5}});
      event_path = writer.path();
    }
    const std::vector<mt::io::ScalarEvent> scalars = mt::io::read_event_scalars(event_path);
    std::filesystem::remove_all(dir);
    if (scalars.size() != 1 || scalars[0].tag != "train/loss" || scalars[0].step != 3 || scalars[0].value != 0.5f) {
      std::cerr << "the event file did not read back\n";
      return 1;
    }
    std::cout << y << "\nOK\n";
    return 0;
  } catch (const mt::Error& e) {
    std::cerr << "mt::Error: " << e.what() << "\n";
    return 1;
  }
}
