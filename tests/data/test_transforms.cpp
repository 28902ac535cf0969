// data::random_horizontal_flip: which samples it mirrors (a function of seed, epoch and dataset
// index only), that it mirrors exactly those, its checks, and the DataLoader applying it.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "mixtrain/data/dataloader.h"
#include "mixtrain/data/transforms.h"
#include "mixtrain/mixtrain.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
namespace md = mixtrain::data;

namespace {

// [B, 1, H, W] with distinct values, so any misplaced element shows.
md::Batch numbered_batch(int64_t B, int64_t H, int64_t W) {
  std::vector<float> v(static_cast<size_t>(B * H * W));
  std::iota(v.begin(), v.end(), 0.0f);
  return {mt::from_vector(v, {B, 1, H, W}), mt::zeros({B}, {.dtype = mt::kInt64})};
}

std::vector<int64_t> range(int64_t lo, int64_t n) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  std::iota(r.begin(), r.end(), lo);
  return r;
}

}  // namespace

TEST(RandomHorizontalFlip, MirrorsExactlyTheDrawnSamples) {
  const int64_t B = 64, H = 3, W = 5, epoch = 2;
  const uint64_t seed = 11;
  md::Batch batch = numbered_batch(B, H, W);
  const std::vector<float> before = batch.input.to_vector<float>();
  const std::vector<int64_t> idx = range(100, B);
  md::random_horizontal_flip(seed)(batch, idx, epoch);
  const std::vector<float> after = batch.input.to_vector<float>();
  int flipped = 0;
  for (int64_t i = 0; i < B; ++i) {
    const bool flip = md::flips_sample(seed, 0.5, epoch, idx[static_cast<size_t>(i)]);
    flipped += flip;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) {
        const int64_t src = (i * H + h) * W + (flip ? W - 1 - w : w);
        EXPECT_EQ(after[static_cast<size_t>((i * H + h) * W + w)], before[static_cast<size_t>(src)])
            << "sample " << i << " row " << h << " col " << w;
      }
  }
  // Binomial(64, 1/2): 32 +- 4; outside [16, 48] means the draw is broken, not unlucky (p < 1e-4).
  EXPECT_GE(flipped, 16);
  EXPECT_LE(flipped, 48);
}

TEST(RandomHorizontalFlip, DependsOnSeedEpochAndIndexOnly) {
  // The same sample gets the same decision in any batch position or batch size.
  for (int64_t index : {0, 7, 12345}) {
    md::Batch one = numbered_batch(1, 2, 4), many = numbered_batch(3, 2, 4);
    const std::vector<int64_t> a{index}, b{index + 1, index, index + 2};
    md::random_horizontal_flip(3)(one, a, 4);
    md::random_horizontal_flip(3)(many, b, 4);
    const bool flipped_alone = one.input.to_vector<float>()[0] == 3.0f;
    const bool flipped_in_batch = many.input.to_vector<float>()[8] == 8.0f + 3.0f;
    EXPECT_EQ(flipped_alone, md::flips_sample(3, 0.5, 4, index));
    EXPECT_EQ(flipped_in_batch, flipped_alone) << "index " << index;
  }
  // Other epochs and seeds draw other patterns.
  int differ_epoch = 0, differ_seed = 0;
  for (int64_t i = 0; i < 256; ++i) {
    differ_epoch += md::flips_sample(3, 0.5, 0, i) != md::flips_sample(3, 0.5, 1, i);
    differ_seed += md::flips_sample(3, 0.5, 0, i) != md::flips_sample(4, 0.5, 0, i);
  }
  EXPECT_GT(differ_epoch, 64);
  EXPECT_GT(differ_seed, 64);
}

TEST(RandomHorizontalFlip, ProbabilityEndsAndDtypes) {
  const std::vector<int64_t> idx = range(0, 32);
  md::Batch none = numbered_batch(32, 2, 3), all = numbered_batch(32, 2, 3);
  const std::vector<float> before = none.input.to_vector<float>();
  md::random_horizontal_flip(1, 0.0)(none, idx, 0);
  md::random_horizontal_flip(1, 1.0)(all, idx, 0);
  EXPECT_EQ(none.input.to_vector<float>(), before);
  const std::vector<float> a = all.input.to_vector<float>();
  for (size_t r = 0; r < a.size(); r += 3) {
    EXPECT_EQ(a[r], before[r + 2]);
    EXPECT_EQ(a[r + 1], before[r + 1]);
  }
  md::Batch half{numbered_batch(32, 2, 3).input.to(mt::kBFloat16), mt::zeros({32}, {.dtype = mt::kInt64})};
  md::random_horizontal_flip(1, 1.0)(half, idx, 0);
  EXPECT_EQ(half.input.to(mt::kFloat32).to_vector<float>(), a);
  md::Batch wide{numbered_batch(32, 2, 3).input.to(mt::kFloat64), mt::zeros({32}, {.dtype = mt::kInt64})};
  md::random_horizontal_flip(1, 1.0)(wide, idx, 0);
  EXPECT_EQ(wide.input.to(mt::kFloat32).to_vector<float>(), a);
}

TEST(RandomHorizontalFlip, RefusesBadArguments) {
  EXPECT_MT_ERROR(md::random_horizontal_flip(0, 1.5), "p must be in [0, 1], got 1.5");
  const std::vector<int64_t> idx{0, 1};
  md::Batch ints{mt::zeros({2, 4}, {.dtype = mt::kInt64}), mt::zeros({2}, {.dtype = mt::kInt64})};
  EXPECT_MT_ERROR(md::random_horizontal_flip(0)(ints, idx, 0), "expected a contiguous floating-point batch");
  md::Batch flat{mt::zeros({2}), mt::zeros({2}, {.dtype = mt::kInt64})};
  EXPECT_MT_ERROR(md::random_horizontal_flip(0)(flat, idx, 0), "[B, ..., W]");
  md::Batch ok = numbered_batch(3, 2, 2);
  EXPECT_MT_ERROR(md::random_horizontal_flip(0)(ok, idx, 0), "2 indices for a batch of 3");
}

TEST(RandomHorizontalFlip, DataLoaderAppliesItOnEveryPathAlike) {
  const md::SyntheticDataset ds(50, {1, 4, 6}, 3, /*seed=*/2);
  const auto transform = md::random_horizontal_flip(9);
  for (int prefetch : {0, 2}) {
    md::DataLoader plain(ds, {.batch_size = 8, .seed = 1, .prefetch = prefetch});
    md::DataLoader flipped(ds, {.batch_size = 8, .seed = 1, .prefetch = prefetch, .transform = transform});
    for (int epoch = 0; epoch < 2; ++epoch) {
      const std::vector<int64_t> order = plain.order(epoch);
      auto p = plain.begin();
      int64_t k = 0, changed = 0;
      for (auto f = flipped.begin(); f != flipped.end(); ++f, ++p, ++k) {
        md::Batch expected{p->input.clone(), p->target};
        const std::span<const int64_t> idx(order.data() + k * 8, static_cast<size_t>(expected.input.size(0)));
        transform(expected, idx, epoch);
        EXPECT_EQ(f->input.to_vector<float>(), expected.input.to_vector<float>())
            << "epoch " << epoch << " batch " << k;
        EXPECT_EQ(f->target.to_vector<int64_t>(), p->target.to_vector<int64_t>());
        changed += f->input.to_vector<float>() != p->input.to_vector<float>();
      }
      EXPECT_GT(changed, 0) << "no batch was augmented";
    }
  }
}
