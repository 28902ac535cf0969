// DataLoader: seeded epoch permutations and a bounded producer/consumer queue fed by one worker
// thread per pass.
#include "mixtrain/data/dataloader.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

#include "mixtrain/random.h"

namespace mixtrain::data {

// One pass over batches [first, end) of an epoch. The worker thread never owns the Pass (it gets
// a raw pointer); the Pass's destructor stops and joins it, so the thread cannot outlive the
// queue it writes to.
struct DataLoader::Pass {
  const Dataset* dataset;
  std::vector<int64_t> order;
  int64_t batch_size;
  int64_t epoch;
  int64_t next;  // next batch index the consumer will take
  int64_t end;
  int prefetch;
  BatchTransform transform;  // may be empty

  // Consumer side (only the consuming thread touches these).
  Batch current;
  int64_t current_index = -1;
  bool finished = false;

  // Shared with the worker, under mu.
  std::mutex mu;
  std::condition_variable ready;  // a batch was queued, or the worker finished
  std::condition_variable space;  // the consumer took a batch, or stop was requested
  std::deque<Batch> queue;
  bool worker_done = false;
  bool stop = false;
  std::exception_ptr error;
  std::thread worker;

  Pass(const Dataset* ds, std::vector<int64_t> ord, int64_t bs, int64_t ep, int64_t first, int64_t last, int pf,
       BatchTransform tf)
      : dataset(ds),
        order(std::move(ord)),
        batch_size(bs),
        epoch(ep),
        next(first),
        end(last),
        prefetch(pf),
        transform(std::move(tf)) {
    if (prefetch > 0 && first < last) worker = std::thread([this, first] { work(first); });
  }

  ~Pass() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    space.notify_all();
    if (worker.joinable()) worker.join();
  }

  Batch build(int64_t b) const {
    const int64_t n = static_cast<int64_t>(order.size());
    const int64_t lo = b * batch_size, hi = std::min(n, lo + batch_size);
    const std::span<const int64_t> indices(order.data() + lo, static_cast<size_t>(hi - lo));
    Batch batch = dataset->get_batch(indices);
    if (transform) transform(batch, indices, epoch);
    return batch;
  }

  void work(int64_t first) {
    try {
      for (int64_t b = first; b < end; ++b) {
        {
          std::unique_lock lock(mu);
          space.wait(lock, [&] { return stop || static_cast<int64_t>(queue.size()) < prefetch; });
          if (stop) break;
        }
        Batch batch = build(b);  // outside the lock: the consumer keeps running meanwhile
        {
          std::lock_guard lock(mu);
          queue.push_back(std::move(batch));
        }
        ready.notify_one();
      }
    } catch (...) {
      std::lock_guard lock(mu);
      error = std::current_exception();
    }
    {
      std::lock_guard lock(mu);
      worker_done = true;
    }
    ready.notify_one();
  }

  // Makes the next batch current, or marks the pass finished.
  void advance() {
    current = Batch{};  // release the previous batch's memory before waiting for the next
    if (next >= end) {
      finished = true;
      return;
    }
    if (prefetch == 0) {
      try {
        current = build(next);
      } catch (...) {
        finished = true;
        throw;
      }
    } else {
      std::unique_lock lock(mu);
      ready.wait(lock, [&] { return !queue.empty() || worker_done; });
      if (queue.empty()) {
        // The worker ended before producing this batch: it failed (or was stopped, which only the
        // destructor does).
        finished = true;
        std::exception_ptr e = error;
        lock.unlock();
        if (e) std::rethrow_exception(e);
        MT_INTERNAL_ASSERT(false, "DataLoader worker ended without producing batch ", next);
      }
      current = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      space.notify_one();
    }
    current_index = next++;
  }
};

DataLoader::DataLoader(const Dataset& dataset, DataLoaderOptions options) : dataset_(&dataset), options_(options) {
  MT_CHECK(options.batch_size >= 1, "DataLoader: batch_size must be at least 1, got ", options.batch_size);
  MT_CHECK(options.prefetch >= 0, "DataLoader: prefetch must be non-negative, got ", options.prefetch);
  MT_CHECK(options.num_replicas >= 1 && options.rank >= 0 && options.rank < options.num_replicas,
           "DataLoader: rank must be in [0, num_replicas), got rank ", options.rank, " of ", options.num_replicas);
}

int64_t DataLoader::shard_size() const {
  const int64_t n = dataset_->size(), w = options_.num_replicas;
  if (w == 1) return n;
  return options_.drop_last ? n / w : (n + w - 1) / w;
}

int64_t DataLoader::size() const {
  const int64_t n = shard_size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

void DataLoader::set_epoch(int64_t epoch) {
  MT_CHECK(epoch >= 0 && epoch <= int64_t{0xFFFFFFFF}, "DataLoader::set_epoch: epoch must be in [0, 2^32), got ",
           epoch);
  epoch_ = epoch;
}

void DataLoader::set_start_batch(int64_t batch) {
  MT_CHECK(batch >= 0 && batch <= size(), "DataLoader::set_start_batch: batch ", batch, " is outside [0, ", size(),
           "] for an epoch of ", size(), " batches");
  start_batch_ = batch;
}

std::vector<int64_t> DataLoader::order(int64_t epoch) const {
  MT_CHECK(epoch >= 0 && epoch <= int64_t{0xFFFFFFFF}, "DataLoader::order: epoch must be in [0, 2^32), got ", epoch);
  const int64_t n = dataset_->size();
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  if (options_.shuffle) shuffle_order(perm, epoch);
  if (options_.num_replicas == 1 || n == 0) return perm;
  // This rank's shard: positions rank, rank + W, ... of the epoch's order, wrapping past its end.
  std::vector<int64_t> shard(static_cast<size_t>(shard_size()));
  for (size_t k = 0; k < shard.size(); ++k)
    shard[k] = perm[static_cast<size_t>((static_cast<int64_t>(k) * options_.num_replicas + options_.rank) % n)];
  return shard;
}

void DataLoader::shuffle_order(std::vector<int64_t>& perm, int64_t epoch) const {
  const auto n = static_cast<int64_t>(perm.size());
  // Fisher-Yates from the back: step i swaps perm[i] with perm[j], j uniform in [0, i], drawn from
  // Philox block i of stream `epoch` under key `seed`. j = floor(u64 * (i+1) / 2^64) (multiply-high)
  // has a bias below (i+1) / 2^64: invisible at any dataset size.
  for (int64_t i = n - 1; i > 0; --i) {
    auto r = random::philox(static_cast<uint64_t>(i), options_.seed, static_cast<uint32_t>(epoch));
    const uint64_t bits = (static_cast<uint64_t>(r[0]) << 32) | r[1];
    const auto j = static_cast<int64_t>((static_cast<unsigned __int128>(bits) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
}

DataLoader::Iterator DataLoader::begin() {
  const int64_t epoch = epoch_, first = start_batch_;
  MT_CHECK(first <= size(), "DataLoader: start batch ", first, " is past the ", size(), " batches of an epoch ",
           "(did the dataset shrink?)");
  epoch_ = epoch + 1;
  start_batch_ = 0;
  auto pass = std::make_shared<Pass>(dataset_, order(epoch), options_.batch_size, epoch, first, size(),
                                     options_.prefetch, options_.transform);
  pass->advance();
  return Iterator(std::move(pass));
}

Batch& DataLoader::Iterator::operator*() const {
  MT_CHECK(!at_end(), "DataLoader: dereferencing an iterator at the end of the epoch");
  return pass_->current;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  MT_CHECK(!at_end(), "DataLoader: incrementing an iterator at the end of the epoch");
  pass_->advance();
  return *this;
}

bool DataLoader::Iterator::at_end() const { return !pass_ || pass_->finished; }

int64_t DataLoader::Iterator::batch_index() const {
  MT_CHECK(!at_end(), "DataLoader: batch_index of an iterator at the end of the epoch");
  return pass_->current_index;
}

int64_t DataLoader::Iterator::epoch() const {
  MT_CHECK(pass_ != nullptr, "DataLoader: epoch of an end iterator");
  return pass_->epoch;
}

}  // namespace mixtrain::data
