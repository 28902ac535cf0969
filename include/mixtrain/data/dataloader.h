// mixtrain/data/dataloader.h: batches from a Dataset, in a seeded order, built ahead of time on a
// background thread.
//
//   mt::data::DataLoader loader(train_set, {.batch_size = 128, .shuffle = true, .seed = 0});
//   for (int epoch = 0; epoch < epochs; ++epoch)
//     for (mt::data::Batch& batch : loader) { ... }   // each pass is the next epoch
//
// Order. Epoch e visits the dataset in the permutation order(e), a Fisher-Yates shuffle driven by
// Philox keyed by `seed` with e as the stream: it depends only on (seed, e, dataset size), never
// on thread counts or on what ran before, so a resumed run sees exactly the batches an
// uninterrupted one would. Batch k of an epoch holds order(e)[k*B .. min((k+1)*B, N)).
// Each pass (each begin()) runs over epoch epoch() and then advances epoch() by one; set_epoch()
// and set_start_batch() choose where the next pass starts, for resuming mid-epoch:
//   loader.set_epoch(saved_epoch);
//   loader.set_start_batch(saved_batch);   // the next pass yields batches saved_batch.. of that epoch
//
// Prefetch. With prefetch = P > 0 a worker thread builds up to P batches ahead of the consumer
// (plus the one being built). Leaving the loop early (break, exception) stops and joins the
// worker when the iterator is destroyed; an exception thrown by the dataset on the worker is
// rethrown to the consumer by the increment that would have produced that batch. With
// prefetch = 0 batches are built on the calling thread.
//
// The Dataset must outlive the loader and every pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "mixtrain/data/dataset.h"
#include "mixtrain/data/transforms.h"

namespace mixtrain::data {

struct DataLoaderOptions {
  int64_t batch_size = 128;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;  // drop a final batch smaller than batch_size
  int prefetch = 2;        // batches built ahead on a background thread; 0: no thread
  // Data parallelism (PyTorch's DistributedSampler): with num_replicas W > 1 this loader visits
  // rank r's shard of each epoch's order, positions r, r + W, r + 2W, ... of the one seeded order
  // every rank computes. Each rank's batch i then holds, together with the other ranks' batch i,
  // exactly batch i of a single process at batch size W * batch_size. A shard has floor(N / W)
  // samples with drop_last, else ceil(N / W), the last ranks' shards padded by wrapping to the
  // order's start (so every rank runs the same number of steps). W = 1 is the plain loader.
  int64_t num_replicas = 1;
  int64_t rank = 0;
  // Applied to every batch after Dataset::get_batch, on the prefetch thread (data/transforms.h).
  BatchTransform transform;
};

class DataLoader {
  struct Pass;  // one run over an epoch: order, queue, worker thread

 public:
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;

    Iterator() = default;  // the end iterator
    Batch& operator*() const;
    Batch* operator->() const { return &**this; }
    // Fetches the next batch (waiting for the worker); rethrows the worker's exception.
    Iterator& operator++();
    // Iterators compare equal when both are at the end; a pass is a single-pass input range.
    bool operator==(const Iterator& other) const { return at_end() == other.at_end(); }

    // Index of the current batch within its epoch, and the epoch.
    int64_t batch_index() const;
    int64_t epoch() const;

   private:
    friend class DataLoader;
    explicit Iterator(std::shared_ptr<Pass> pass) : pass_(std::move(pass)) {}
    bool at_end() const;
    std::shared_ptr<Pass> pass_;  // shared by copies; the last one stops and joins the worker
  };

  explicit DataLoader(const Dataset& dataset, DataLoaderOptions options = {});
  // A loader keeps a reference: a temporary dataset would dangle.
  DataLoader(const Dataset&& dataset, DataLoaderOptions options = {}) = delete;

  // Batches per epoch: ceil(S / B), or floor(S / B) with drop_last, where S is the shard size
  // (the dataset size N without data parallelism).
  int64_t size() const;
  // Samples this loader visits per epoch: N, or this rank's shard of N.
  int64_t shard_size() const;
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

  // The epoch the next pass runs over (starts at 0).
  int64_t epoch() const { return epoch_; }
  void set_epoch(int64_t epoch);
  // The batch the next pass starts at (0..size()); reset to 0 once a pass starts.
  int64_t start_batch() const { return start_batch_; }
  void set_start_batch(int64_t batch);

  // Dataset indices in the order epoch `epoch` visits them (identity without shuffle): this rank's
  // shard of the epoch's order with num_replicas > 1.
  std::vector<int64_t> order(int64_t epoch) const;

  // Starts a pass over epoch() from start_batch() (and builds its first batch), then advances
  // epoch() and resets start_batch().
  Iterator begin();
  Iterator end() const { return Iterator(); }

 private:
  void shuffle_order(std::vector<int64_t>& perm, int64_t epoch) const;

  const Dataset* dataset_;
  DataLoaderOptions options_;
  int64_t epoch_ = 0;
  int64_t start_batch_ = 0;
};

}  // namespace mixtrain::data
