#include "strata/loaders/data_loader.h"

#include <algorithm>
#include <numeric>

#include "random_stream.h"
#include "strata/error.h"

namespace strata {

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, const DataLoaderOptions& options)
    : dataset_(std::move(dataset)), options_(options) {
  STRATA_CHECK(dataset_ != nullptr, "DataLoader needs a dataset");
  STRATA_CHECK(options.batchSize > 0, "DataLoader: batch size must be positive, got {}", options.batchSize);
  STRATA_CHECK(options.worldSize > 0 && options.rank >= 0 && options.rank < options.worldSize,
               "DataLoader: rank {} is outside a world of {} ranks", options.rank, options.worldSize);
  STRATA_CHECK(options.prefetch >= 0, "DataLoader: prefetch depth must be >= 0, got {}", options.prefetch);
  sampleShape_ = dataset_->sampleShape();
  targetShape_ = dataset_->targetShape();
  sampleType_ = dataset_->sampleType();
  const std::int64_t size = dataset_->size();
  STRATA_CHECK(size > 0, "DataLoader: dataset {} is empty", dataset_->description());
  const std::int64_t world = options.worldSize;
  const std::int64_t batch = options.batchSize;
  if (options.dropLast) {
    batchesPerEpoch_ = size / world / batch;
    samplesPerRank_ = batchesPerEpoch_ * batch;
    STRATA_CHECK(batchesPerEpoch_ > 0,
                 "DataLoader: dataset {} has {} samples, too few for one full batch of {} on each of {} ranks "
                 "(drop-last is on)",
                 dataset_->description(), size, batch, world);
  } else {
    samplesPerRank_ = (size + world - 1) / world;
    batchesPerEpoch_ = (samplesPerRank_ + batch - 1) / batch;
  }
}

DataLoader::~DataLoader() {
  stopWorker();
}

std::vector<std::int64_t> DataLoader::shardIndices(std::int64_t epoch) const {
  const std::int64_t size = dataset_->size();
  std::vector<std::int64_t> order(static_cast<std::size_t>(size));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (options_.shuffle) {
    // Fisher-Yates from a stream keyed by (seed, epoch) only: every rank draws the same permutation.
    RandomStream rng = RandomStream::keyed({options_.seed, static_cast<std::uint64_t>(epoch)});
    for (std::int64_t i = size - 1; i > 0; --i) {
      const auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i + 1)));
      std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
    }
  }
  std::vector<std::int64_t> shard(static_cast<std::size_t>(samplesPerRank_));
  for (std::int64_t k = 0; k < samplesPerRank_; ++k) {
    // Past the end only when padding (Note [Sharding]): wrap to the start of the permutation.
    const std::int64_t position = (k * options_.worldSize + options_.rank) % size;
    shard[static_cast<std::size_t>(k)] = order[static_cast<std::size_t>(position)];
  }
  return shard;
}

void DataLoader::startEpoch(std::int64_t epoch) {
  stopWorker();
  dataset_->setEpoch(epoch);
  shard_ = shardIndices(epoch);
  nextBatch_ = 0;
  started_ = true;
  if (options_.prefetch > 0) {
    worker_ = std::thread([this] { workerLoop(); });
  }
}

Batch DataLoader::makeBatch(std::int64_t batchIndex) const {
  const std::int64_t begin = batchIndex * options_.batchSize;
  const std::int64_t rows = std::min(options_.batchSize, samplesPerRank_ - begin);
  Shape inputShape = sampleShape_;
  inputShape.insert(inputShape.begin(), rows);
  Shape targetShape = targetShape_;
  targetShape.insert(targetShape.begin(), rows);
  Batch batch;
  batch.index = batchIndex;
  batch.inputs = Tensor::empty(sampleType_, inputShape, MemoryCategory::Other);
  batch.targets = Tensor::empty(DType::Int64, targetShape, MemoryCategory::Other);
  batch.samples.assign(shard_.begin() + begin, shard_.begin() + begin + rows);
  const std::size_t inputBytes = static_cast<std::size_t>(numElements(sampleShape_)) * dtypeSize(sampleType_);
  const std::int64_t targetNumel = numElements(targetShape_);
  auto* inputs = static_cast<char*>(batch.inputs.rawData());
  auto* targets = batch.targets.data<std::int64_t>();
  for (std::int64_t i = 0; i < rows; ++i) {
    // A large batch (224x224 resizes) takes a while: let a destructor stop us between samples.
    if (stop_.load(std::memory_order_relaxed)) {
      break;
    }
    dataset_->get(batch.samples[static_cast<std::size_t>(i)], inputs + static_cast<std::size_t>(i) * inputBytes,
                  targets + i * targetNumel);
  }
  return batch;
}

void DataLoader::workerLoop() {
  try {
    for (std::int64_t b = 0; b < batchesPerEpoch_; ++b) {
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock,
                      [&] { return stop_.load() || queue_.size() < static_cast<std::size_t>(options_.prefetch); });
        if (stop_.load()) {
          return;
        }
      }
      // Fill outside the lock so the consumer can take finished batches meanwhile.
      Batch batch = makeBatch(b);
      {
        std::lock_guard lock(mutex_);
        if (stop_.load()) {
          return;
        }
        queue_.push_back(std::move(batch));
      }
      changed_.notify_all();
    }
  } catch (...) {
    std::lock_guard lock(mutex_);
    error_ = std::current_exception();
  }
  {
    std::lock_guard lock(mutex_);
    workerDone_ = true;
  }
  changed_.notify_all();
}

std::optional<Batch> DataLoader::next() {
  STRATA_CHECK(started_, "DataLoader::next() called before startEpoch()");
  if (options_.prefetch == 0) {
    if (nextBatch_ >= batchesPerEpoch_) {
      return std::nullopt;
    }
    return makeBatch(nextBatch_++);
  }
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return !queue_.empty() || workerDone_; });
  if (!queue_.empty()) {
    Batch batch = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    changed_.notify_all();
    return batch;
  }
  if (error_) {
    std::rethrow_exception(error_);
  }
  return std::nullopt;
}

void DataLoader::stopWorker() {
  {
    std::lock_guard lock(mutex_);
    stop_.store(true);
  }
  changed_.notify_all();
  if (worker_.joinable()) {
    worker_.join();
  }
  queue_.clear();
  error_ = nullptr;
  workerDone_ = false;
  stop_.store(false);
}

}  // namespace strata
