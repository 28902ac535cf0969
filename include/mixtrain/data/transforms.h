// mixtrain/data/transforms.h: batch transforms (data augmentation) that a DataLoader applies to
// each batch on its prefetch thread, after Dataset::get_batch.
//
//   mt::data::DataLoader loader(train_set, {.batch_size = 128, .transform = mt::data::random_horizontal_flip(seed)});
//
// A transform sees the batch, the dataset indices of its samples and the epoch. Random transforms
// draw from Philox keyed by (their seed, epoch, sample index) only, so a sample gets the same
// augmentation whatever the batch size, thread count, prefetch depth or point of resumption: a
// resumed run sees exactly the batches an uninterrupted one would.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "mixtrain/data/dataset.h"

namespace mixtrain::data {

// Changes batch.input (and/or batch.target) in place; indices[i] is sample i's dataset index.
using BatchTransform = std::function<void(Batch& batch, std::span<const int64_t> indices, int64_t epoch)>;

// Mirrors each image left-right (reverses the last dim) with probability p, independently per
// sample and epoch. Input: a floating-point batch [B, ..., W] of rank >= 2 (e.g. [B, 1, 28, 28]);
// throws mt::Error otherwise, and for p outside [0, 1].
BatchTransform random_horizontal_flip(uint64_t seed, double p = 0.5);

// Whether random_horizontal_flip(seed, p) mirrors the sample with dataset index `index` in `epoch`.
bool flips_sample(uint64_t seed, double p, int64_t epoch, int64_t index);

}  // namespace mixtrain::data
