// The fused head and loss (nn::functional::linear_cross_entropy) of a language model against its
// block size, and against the unfused cross_entropy(linear(...)): the forward and backward of one
// step's head under autocast, median time and peak tensor bytes. Chooses
// kLinearCrossEntropyBlockBytes (docs/performance.md#fused-head-and-loss).
//
//   build/bench/mixtrain_lm_head_blocks [--rows 4096] [--embed 768] [--vocab 50257]
//       [--precision bf16|fp16|fp32] [--reps 3] [--blocks 64,128,...]
// Prints one line per configuration: rows per block (0: unfused), MiB of fp32 logits per block,
// median ms, peak MiB above the inputs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;

namespace {

int64_t parse_int(const char* flag, const char* text) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < 0 || v > (1LL << 31)) {
    std::fprintf(stderr, "%s: expected a non-negative integer, got '%s'\n", flag, text);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 4096, embed = 768, vocab = 50257, reps = 3;
  std::string precision = "bf16";
  std::vector<int64_t> blocks = {64, 128, 256, 512, 1024, 2048, 4096};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value (see the header of bench/gpt2/lm_head_blocks.cpp)\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    if (a == "--rows") rows = parse_int("--rows", v);
    else if (a == "--embed") embed = parse_int("--embed", v);
    else if (a == "--vocab") vocab = parse_int("--vocab", v);
    else if (a == "--reps") reps = std::max<int64_t>(1, parse_int("--reps", v));
    else if (a == "--precision") precision = v;
    else if (a == "--blocks") {
      blocks.clear();
      std::stringstream ss(v);
      for (std::string item; std::getline(ss, item, ',');) blocks.push_back(parse_int("--blocks", item.c_str()));
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (rows < 1 || embed < 1 || vocab < 1 || (precision != "bf16" && precision != "fp16" && precision != "fp32")) {
    std::fprintf(stderr, "--rows/--embed/--vocab must be positive and --precision bf16, fp16 or fp32\n");
    return 2;
  }
  const std::optional<mt::DType> dt = precision == "bf16"   ? std::optional(mt::kBFloat16)
                                      : precision == "fp16" ? std::optional(mt::kFloat16)
                                                            : std::nullopt;
  mt::Generator g(1);
  const mt::Tensor x = mt::randn({rows, embed}, {}, &g).to(dt.value_or(mt::kFloat32));
  const mt::Tensor w = mt::mul(mt::randn({vocab, embed}, {}, &g), 0.02);
  std::vector<int64_t> t(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) t[i] = (i * 7919) % vocab;
  const mt::Tensor y = mt::from_vector(t);
  std::printf("head [%lld, %lld] x [%lld, %lld]^T, %s, %lld reps\n", static_cast<long long>(rows),
              static_cast<long long>(embed), static_cast<long long>(vocab), static_cast<long long>(embed),
              precision.c_str(), static_cast<long long>(reps));
  std::printf("%12s %16s %12s %10s\n", "block rows", "logits MiB/block", "median ms", "peak MiB");
  std::vector<int64_t> configs = blocks;
  configs.insert(configs.begin(), 0);  // 0: unfused
  for (int64_t block : configs) {
    std::vector<double> ms;
    int64_t peak = 0;
    for (int64_t r = 0; r < reps; ++r) {
      mt::Tensor xl = x.clone().requires_grad_(), wl = w.clone().requires_grad_();
      mt::memory::reset_peak();
      const int64_t base = mt::memory::stats().current_bytes;
      const auto t0 = std::chrono::steady_clock::now();
      mt::Tensor loss;
      {
        mt::amp::Autocast ac(mt::DeviceType::kCPU, dt.value_or(mt::kBFloat16), dt.has_value());
        loss = block == 0 ? F::cross_entropy(mt::linear(xl, wl), y)
                          : F::linear_cross_entropy(xl, wl, mt::Tensor(), y, {.block_rows = block});
      }
      loss.backward();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      peak = std::max(peak, mt::memory::stats().peak_bytes - base);
    }
    std::sort(ms.begin(), ms.end());
    const double logits_mib = block == 0 ? static_cast<double>(rows) * vocab * 4 / (1 << 20)
                                         : static_cast<double>(std::min(block, rows)) * vocab * 4 / (1 << 20);
    std::printf("%12s %16.1f %12.1f %10.1f\n", block == 0 ? "unfused" : std::to_string(block).c_str(), logits_mib,
                ms[ms.size() / 2], static_cast<double>(peak) / (1 << 20));
    std::fflush(stdout);
  }
  return 0;
}
