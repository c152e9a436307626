#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "strata/loaders/dataset.h"
#include "strata/tensor.h"

namespace strata {

struct DataLoaderOptions {
  std::int64_t batchSize = 32;
  int rank = 0;
  int worldSize = 1;
  bool shuffle = true;
  // Seed of the per-epoch shuffle; every rank must use the same one so that their shards are disjoint.
  std::uint64_t seed = 0;
  // Drop samples so that every rank gets the same number of full batches (see Note [Sharding]).
  bool dropLast = false;
  // Batches the worker thread fills ahead of the consumer. 0 runs no thread: next() fills each batch itself.
  int prefetch = 2;
};

struct Batch {
  Tensor inputs;                      // [B, sample shape...] of the data set's sampleType(), MemoryCategory::Other
  Tensor targets;                     // [B, target shape...] int64 class indices
  std::int64_t index = 0;             // batch number within this rank's epoch
  std::vector<std::int64_t> samples;  // dataset indices of the B rows
};

// Feeds one rank's share of a data set in batches, prepared by a background thread into a bounded queue.
//
// Note [Sharding]: each epoch draws one permutation of [0, size) from (seed, epoch), identical on every rank (the
// identity when shuffle is off). Rank r takes positions r, r + worldSize, r + 2 * worldSize, ... of it, so the ranks'
// shards are disjoint and batch b of all ranks together covers a contiguous stretch of the permutation.
// - dropLast = false: every rank gets ceil(size / worldSize) samples, padded by wrapping around to the start of the
//   permutation (as torch's DistributedSampler does). Every sample is seen exactly once per epoch when worldSize
//   divides size; otherwise the first (worldSize - size % worldSize) samples of the permutation are seen twice, so
//   that all ranks run the same number of steps (a rank that stopped early would hang the others' collectives).
//   The last batch may be smaller than batchSize (the same size on every rank).
// - dropLast = true: every rank gets floor(floor(size / worldSize) / batchSize) full batches; the samples left over
//   are skipped this epoch (different ones each epoch when shuffling). No sample is seen twice.
//
// next() is for one consumer thread; startEpoch() restarts the worker, abandoning the rest of the current epoch.
class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> dataset, const DataLoaderOptions& options);
  // Stops and joins the worker, also in the middle of an epoch.
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts (or restarts) the epoch: reshuffles, sets the dataset's augmentation epoch and begins prefetching.
  void startEpoch(std::int64_t epoch);
  // The next batch of the epoch, or nullopt once it is exhausted. Waits for the worker only when it is behind;
  // rethrows an error the worker hit (after the batches made before it).
  std::optional<Batch> next();

  std::int64_t batchesPerEpoch() const { return batchesPerEpoch_; }
  std::int64_t samplesPerRank() const { return samplesPerRank_; }
  // The dataset indices this rank visits in `epoch`, in order (what next() delivers).
  std::vector<std::int64_t> shardIndices(std::int64_t epoch) const;
  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  Batch makeBatch(std::int64_t batchIndex) const;
  void workerLoop();
  void stopWorker();

  std::shared_ptr<Dataset> dataset_;
  DataLoaderOptions options_;
  Shape sampleShape_;
  Shape targetShape_;
  DType sampleType_ = DType::Float32;
  std::int64_t samplesPerRank_ = 0;
  std::int64_t batchesPerEpoch_ = 0;

  // The current epoch's shard; written only while no worker runs.
  std::vector<std::int64_t> shard_;
  bool started_ = false;
  std::int64_t nextBatch_ = 0;  // prefetch == 0 only

  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable changed_;  // a batch was queued or taken, the worker finished, or stop was requested
  std::deque<Batch> queue_;
  std::atomic<bool> stop_{false};  // atomic: the worker also polls it between samples
  bool workerDone_ = false;
  std::exception_ptr error_;
};

}  // namespace strata
