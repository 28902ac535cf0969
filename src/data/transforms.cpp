// Batch transforms: random_horizontal_flip.
#include "mixtrain/data/transforms.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "mixtrain/error.h"
#include "mixtrain/random.h"

namespace mixtrain::data {
namespace {

// Keeps the flip draws apart from the DataLoader's shuffle, which keys Philox with the bare seed.
constexpr uint64_t kFlipKeySalt = 0x666c69702d6c7231ull;  // "flip-lr1"

// Mirroring moves whole elements, so only their width matters: W is an unsigned type of that size.
template <typename W>
void mirror_rows(void* data, int64_t sample, int64_t row_count, int64_t width) {
  W* base = static_cast<W*>(data) + sample * row_count * width;
  for (int64_t r = 0; r < row_count; ++r) std::reverse(base + r * width, base + (r + 1) * width);
}

}  // namespace

bool flips_sample(uint64_t seed, double p, int64_t epoch, int64_t index) {
  // One Philox block per (epoch, index): stream = epoch, block = index.
  const auto r = random::philox(static_cast<uint64_t>(index), seed ^ kFlipKeySalt, static_cast<uint32_t>(epoch));
  return random::uints_to_unit_double(r[0], r[1]) < p;
}

BatchTransform random_horizontal_flip(uint64_t seed, double p) {
  MT_CHECK(std::isfinite(p) && p >= 0.0 && p <= 1.0, "random_horizontal_flip: p must be in [0, 1], got ", p);
  return [seed, p](Batch& batch, std::span<const int64_t> indices, int64_t epoch) {
    Tensor& x = batch.input;
    MT_CHECK(x.dim() >= 2 && x.is_floating_point() && x.is_contiguous(),
             "random_horizontal_flip: expected a contiguous floating-point batch [B, ..., W], got ", describe(x));
    const int64_t B = x.size(0);
    MT_CHECK(static_cast<int64_t>(indices.size()) == B, "random_horizontal_flip: ", indices.size(),
             " indices for a batch of ", B);
    const int64_t width = x.size(-1);
    const int64_t rows = B == 0 || width == 0 ? 0 : x.numel() / (B * width);
    for (int64_t i = 0; i < B; ++i) {
      if (!flips_sample(seed, p, epoch, indices[static_cast<size_t>(i)])) continue;
      if (x.element_size() == 2) mirror_rows<uint16_t>(x.raw_data(), i, rows, width);
      if (x.element_size() == 4) mirror_rows<uint32_t>(x.raw_data(), i, rows, width);
      if (x.element_size() == 8) mirror_rows<uint64_t>(x.raw_data(), i, rows, width);
    }
  };
}

}  // namespace mixtrain::data
