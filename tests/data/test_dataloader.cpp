// DataLoader: batch counts, seeded order, exact resume, the prefetch thread (runs ahead, stops on
// early exit, forwards exceptions).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "mixtrain/data/dataloader.h"
#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;
using mt::data::Batch;
using mt::data::DataLoader;

namespace {

// Example i: input float [1] = i, target int64 = i. Optionally slow, optionally failing on one
// index; counts calls and records the threads that built batches.
class IndexDataset : public mt::data::Dataset {
 public:
  explicit IndexDataset(int64_t n, int64_t fail_on = -1, int sleep_ms = 0)
      : n_(n), fail_on_(fail_on), sleep_ms_(sleep_ms) {}
  int64_t size() const override { return n_; }
  Batch get_batch(std::span<const int64_t> indices) const override {
    ++calls;
    {
      std::lock_guard lock(mu);
      threads.insert(std::this_thread::get_id());
    }
    if (sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    std::vector<int64_t> idx(indices.begin(), indices.end());
    for (int64_t i : idx)
      if (i == fail_on_) MT_FAIL("IndexDataset: example ", i, " is corrupt");
    std::vector<float> f(idx.begin(), idx.end());
    const int64_t b = static_cast<int64_t>(idx.size());
    return {mt::from_vector(f, {b, 1}), mt::from_vector(idx, {b})};
  }

  mutable std::atomic<int> calls{0};
  mutable std::mutex mu;
  mutable std::set<std::thread::id> threads;

 private:
  int64_t n_, fail_on_;
  int sleep_ms_;
};

// The targets of every batch of one pass.
std::vector<std::vector<int64_t>> one_pass(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (Batch& b : loader) out.push_back(b.target.to_vector<int64_t>());
  return out;
}

}  // namespace

TEST(DataLoader, BatchCountWithAndWithoutDropLast) {
  IndexDataset ds(10);
  DataLoader keep(ds, {.batch_size = 3, .shuffle = false});
  DataLoader drop(ds, {.batch_size = 3, .shuffle = false, .drop_last = true});
  EXPECT_EQ(keep.size(), 4);
  EXPECT_EQ(drop.size(), 3);
  auto k = one_pass(keep), d = one_pass(drop);
  ASSERT_EQ(k.size(), 4u);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(k.back(), (std::vector<int64_t>{9}));
  EXPECT_EQ(d.back(), (std::vector<int64_t>{6, 7, 8}));
  EXPECT_EQ(k[1], (std::vector<int64_t>{3, 4, 5}));  // no shuffle: identity order

  IndexDataset exact(9);
  EXPECT_EQ(DataLoader(exact, {.batch_size = 3}).size(), 3);
  EXPECT_EQ(DataLoader(exact, {.batch_size = 3, .drop_last = true}).size(), 3);
  IndexDataset empty(0);
  DataLoader none(empty, {.batch_size = 4});
  EXPECT_EQ(none.size(), 0);
  EXPECT_TRUE(none.begin() == none.end());
  IndexDataset small(2);
  EXPECT_EQ(DataLoader(small, {.batch_size = 4, .drop_last = true}).size(), 0);
  EXPECT_THROW(DataLoader(small, {.batch_size = 0}), mt::Error);
}

TEST(DataLoader, BatchShapesStackExamples) {
  mt::data::SyntheticDataset ds(10, {1, 4, 4}, 3);
  DataLoader loader(ds, {.batch_size = 4, .seed = 1});
  std::vector<int64_t> sizes;
  for (auto& batch : loader) {
    EXPECT_EQ(batch.input.dim(), 4);
    EXPECT_EQ(batch.input.size(1), 1);
    EXPECT_EQ(batch.target.dim(), 1);
    EXPECT_EQ(batch.target.size(0), batch.input.size(0));
    sizes.push_back(batch.input.size(0));
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));
}

TEST(DataLoader, EveryIndexExactlyOncePerEpoch) {
  IndexDataset ds(1000);
  DataLoader loader(ds, {.batch_size = 64, .seed = 3});
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> seen;
    for (const auto& b : one_pass(loader)) seen.insert(seen.end(), b.begin(), b.end());
    ASSERT_EQ(seen.size(), 1000u);
    std::vector<int64_t> order = seen;
    std::sort(seen.begin(), seen.end());
    for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(seen[i], i);
    EXPECT_EQ(order, loader.order(epoch));
    // Shuffled: far from the identity.
    int fixed = 0;
    for (int64_t i = 0; i < 1000; ++i) fixed += order[i] == i;
    EXPECT_LT(fixed, 20);
  }
  EXPECT_EQ(loader.epoch(), 3);
}

TEST(DataLoader, SameSeedSameOrderOtherSeedOrEpochDiffers) {
  IndexDataset ds(500);
  DataLoader a(ds, {.batch_size = 50, .seed = 42});
  DataLoader b(ds, {.batch_size = 50, .seed = 42, .prefetch = 0});
  DataLoader c(ds, {.batch_size = 50, .seed = 43});
  auto a0 = one_pass(a), b0 = one_pass(b), c0 = one_pass(c);
  EXPECT_EQ(a0, b0);  // and prefetching does not change the order
  EXPECT_NE(a0, c0);
  auto a1 = one_pass(a);  // the next pass is epoch 1
  EXPECT_NE(a0, a1);
  EXPECT_EQ(a.order(1), b.order(1));
  EXPECT_NE(a.order(0), a.order(1));
  // The order depends only on (seed, epoch): a fresh loader at epoch 1 matches.
  DataLoader d(ds, {.batch_size = 50, .seed = 42});
  d.set_epoch(1);
  EXPECT_EQ(one_pass(d), a1);
}

TEST(DataLoader, ResumeAtEpochAndBatchReproducesTheUninterruptedRun) {
  IndexDataset ds(103);
  const mt::data::DataLoaderOptions opts{
      .batch_size = 10, .shuffle = true, .seed = 9, .drop_last = false, .prefetch = 3};
  DataLoader full(ds, opts);
  std::vector<std::vector<std::vector<int64_t>>> epochs;
  for (int e = 0; e < 3; ++e) epochs.push_back(one_pass(full));

  // Interrupted after batch 4 of epoch 1 (5 batches done): resume at (epoch 1, batch 5).
  DataLoader resumed(ds, opts);
  resumed.set_epoch(1);
  resumed.set_start_batch(5);
  std::vector<std::vector<int64_t>> rest;
  int64_t expected_index = 5;
  for (auto it = resumed.begin(); it != resumed.end(); ++it) {
    EXPECT_EQ(it.batch_index(), expected_index++);
    EXPECT_EQ(it.epoch(), 1);
    rest.push_back(it->target.to_vector<int64_t>());
  }
  EXPECT_EQ(rest, std::vector<std::vector<int64_t>>(epochs[1].begin() + 5, epochs[1].end()));
  EXPECT_EQ(one_pass(resumed), epochs[2]);  // then continues with epoch 2 from its start

  // Starting at the last batch boundary gives an empty pass; past it is an error.
  resumed.set_start_batch(resumed.size());
  EXPECT_TRUE(resumed.begin() == resumed.end());
  EXPECT_THROW(resumed.set_start_batch(resumed.size() + 1), mt::Error);
  EXPECT_THROW(resumed.set_epoch(-1), mt::Error);
}

TEST(DataLoader, PrefetchRunsOnAWorkerThreadAhead) {
  IndexDataset ds(40);
  DataLoader loader(ds, {.batch_size = 4, .prefetch = 3});
  auto it = loader.begin();
  // The worker fills the queue (3 batches) beyond the one handed out, without the consumer asking.
  for (int i = 0; i < 2000 && ds.calls.load() < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(ds.calls.load(), 4);
  {
    std::lock_guard lock(ds.mu);
    EXPECT_EQ(ds.threads.count(std::this_thread::get_id()), 0u);
  }
  // And stops there: it does not run further ahead than `prefetch` batches.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(ds.calls.load(), 4);
}

TEST(DataLoader, EarlyBreakStopsAndJoinsTheWorker) {
  IndexDataset ds(1000, /*fail_on=*/-1, /*sleep_ms=*/1);
  DataLoader loader(ds, {.batch_size = 10, .prefetch = 4});
  const auto start = std::chrono::steady_clock::now();
  for (int rep = 0; rep < 10; ++rep) {
    int n = 0;
    for (auto& batch : loader) {
      (void)batch;
      if (++n == 2) break;
    }
  }
  // Each pass built at most 2 + 4 queued + 1 in flight = 7 batches of the 100, then was joined.
  EXPECT_LE(ds.calls.load(), 70);
  const int calls_after = ds.calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(ds.calls.load(), calls_after);  // no worker is left running
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(DataLoader, WorkerExceptionReachesTheConsumerInOrder) {
  for (int prefetch : {0, 1, 4}) {
    IndexDataset ds(20, /*fail_on=*/13);
    DataLoader loader(ds, {.batch_size = 4, .shuffle = false, .prefetch = prefetch});
    std::vector<int64_t> seen;
    try {
      for (auto& batch : loader) {
        auto t = batch.target.to_vector<int64_t>();
        seen.insert(seen.end(), t.begin(), t.end());
      }
      ADD_FAILURE() << "no exception with prefetch " << prefetch;
    } catch (const mt::Error& e) {
      EXPECT_NE(std::string(e.what()).find("example 13 is corrupt"), std::string::npos) << e.what();
    }
    // Batches 0..2 (indices 0..11) arrived before the failing batch 3.
    EXPECT_EQ(seen.size(), 12u) << "prefetch " << prefetch;
  }
  // A failure in the very first batch surfaces from begin().
  IndexDataset first(8, /*fail_on=*/0);
  DataLoader loader(first, {.batch_size = 4, .shuffle = false});
  EXPECT_THROW(loader.begin(), mt::Error);
}

TEST(DataLoader, IteratorCopiesShareThePass) {
  IndexDataset ds(6);
  DataLoader loader(ds, {.batch_size = 2, .shuffle = false});
  auto it = loader.begin();
  auto copy = it;
  ++copy;
  EXPECT_EQ(it->target.to_vector<int64_t>(), (std::vector<int64_t>{2, 3}));  // single-pass input range
  it = DataLoader::Iterator();  // dropping one copy keeps the pass alive for the other
  ++copy;
  EXPECT_EQ(copy->target.to_vector<int64_t>(), (std::vector<int64_t>{4, 5}));
  ++copy;
  EXPECT_TRUE(copy == loader.end());
  EXPECT_THROW(*copy, mt::Error);
}

// Data parallelism: rank r of W visits positions r, r + W, ... of the one seeded epoch order.
TEST(DataLoader, ShardsAreDisjointAndTogetherAreTheSingleProcessBatches) {
  IndexDataset ds(103);
  for (bool drop_last : {true, false}) {
    SCOPED_TRACE(drop_last ? "drop_last" : "keep the last batch");
    DataLoader one(ds, {.batch_size = 8, .seed = 5, .drop_last = drop_last, .prefetch = 0});
    DataLoader r0(ds, {.batch_size = 4, .seed = 5, .drop_last = drop_last, .prefetch = 0, .num_replicas = 2, .rank = 0});
    DataLoader r1(ds, {.batch_size = 4, .seed = 5, .drop_last = drop_last, .prefetch = 0, .num_replicas = 2, .rank = 1});
    EXPECT_EQ(r0.shard_size(), drop_last ? 51 : 52);
    EXPECT_EQ(r0.size(), r1.size()) << "every rank runs the same number of steps";
    EXPECT_EQ(r0.size(), drop_last ? 12 : 13);
    for (int64_t epoch : {0, 3}) {
      one.set_epoch(epoch);
      r0.set_epoch(epoch);
      r1.set_epoch(epoch);
      const auto b1 = one_pass(one), a = one_pass(r0), b = one_pass(r1);
      const std::vector<int64_t> order = one.order(epoch);
      // Batch i of the ranks together is batch i of one process at twice the batch (full batches).
      for (size_t i = 0; i < a.size() && (i + 1) * 8 <= order.size(); ++i) {
        std::vector<int64_t> both = a[i];
        both.insert(both.end(), b[i].begin(), b[i].end());
        std::sort(both.begin(), both.end());
        std::vector<int64_t> single = b1[i];
        std::sort(single.begin(), single.end());
        EXPECT_EQ(both, single) << "epoch " << epoch << " batch " << i;
      }
      // Disjoint within the dataset: the only repeats are the padding of a ceil-sized shard.
      std::vector<int64_t> all;
      for (const auto& v : a) all.insert(all.end(), v.begin(), v.end());
      for (const auto& v : b) all.insert(all.end(), v.begin(), v.end());
      std::set<int64_t> distinct(all.begin(), all.end());
      EXPECT_EQ(static_cast<int64_t>(all.size() - distinct.size()), drop_last ? 0 : 1) << "one padded sample";
      // drop_last: 12 full batches of 4 per rank (the shard's last 3 samples make no full batch).
      EXPECT_EQ(static_cast<int64_t>(distinct.size()), drop_last ? 2 * 12 * 4 : 103);
    }
  }
  // One replica is the plain loader.
  DataLoader plain(ds, {.batch_size = 8, .seed = 5, .prefetch = 0});
  DataLoader single(ds, {.batch_size = 8, .seed = 5, .prefetch = 0, .num_replicas = 1, .rank = 0});
  EXPECT_EQ(plain.order(2), single.order(2));
  EXPECT_THROW(DataLoader(ds, {.num_replicas = 2, .rank = 2}), mt::Error);
  EXPECT_THROW(DataLoader(ds, {.num_replicas = 0}), mt::Error);
}
