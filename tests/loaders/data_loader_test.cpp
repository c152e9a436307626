#include "strata/loaders/data_loader.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "strata/error.h"
#include "strata/loaders/synthetic_dataset.h"
#include "test_models.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// Sample i is a {1, 2, 2} image filled with i and label i % 10, so a batch tells which samples it holds. Optionally
// slow (to keep the worker busy) or failing at one index.
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(std::int64_t size, std::chrono::milliseconds delay = {}, std::int64_t failAt = -1)
      : size_(size), delay_(delay), failAt_(failAt) {}

  std::int64_t size() const override { return size_; }
  Shape sampleShape() const override { return {1, 2, 2}; }
  std::int64_t numClasses() const override { return 10; }
  void get(std::int64_t index, void* input, std::int64_t* label) const override {
    checkIndex(index);
    gets_.fetch_add(1);
    if (delay_.count() > 0) {
      std::this_thread::sleep_for(delay_);
    }
    STRATA_CHECK(index != failAt_, "index dataset: sample {} is unreadable", index);
    auto* image = static_cast<float*>(input);
    std::fill(image, image + 4, static_cast<float>(index));
    *label = index % 10;
  }
  void setEpoch(std::int64_t epoch) override { epoch_ = epoch; }
  std::string description() const override { return "index dataset"; }

  std::int64_t epoch() const { return epoch_; }
  int gets() const { return gets_.load(); }

 private:
  std::int64_t size_;
  std::chrono::milliseconds delay_;
  std::int64_t failAt_;
  std::int64_t epoch_ = -1;
  mutable std::atomic<int> gets_{0};
};

using testing::errorOf;

DataLoaderOptions loaderOptions(std::int64_t batchSize, int rank, int worldSize, bool dropLast = false) {
  DataLoaderOptions options;
  options.batchSize = batchSize;
  options.rank = rank;
  options.worldSize = worldSize;
  options.seed = 1234;
  options.dropLast = dropLast;
  return options;
}

// Every sample index one rank's loader delivers in an epoch, read back from the image contents, checking each batch.
std::vector<std::int64_t> drainEpoch(DataLoader& loader, std::int64_t epoch, std::vector<std::int64_t>* batchSizes) {
  loader.startEpoch(epoch);
  std::vector<std::int64_t> samples;
  std::int64_t batches = 0;
  while (std::optional<Batch> batch = loader.next()) {
    EXPECT_EQ(batch->index, batches);
    const std::int64_t rows = batch->inputs.dim(0);
    EXPECT_EQ(batch->inputs.dtype(), DType::Float32);
    EXPECT_EQ(batch->inputs.shape(), (Shape{rows, 1, 2, 2}));
    EXPECT_EQ(batch->targets.dtype(), DType::Int64);
    EXPECT_EQ(batch->targets.shape(), (Shape{rows}));
    EXPECT_EQ(static_cast<std::int64_t>(batch->samples.size()), rows);
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto index = static_cast<std::int64_t>(batch->inputs.data<float>()[r * 4 + 3]);
      EXPECT_EQ(index, batch->samples[static_cast<std::size_t>(r)]);
      EXPECT_EQ(batch->targets.data<std::int64_t>()[r], index % 10);
      samples.push_back(index);
    }
    if (batchSizes != nullptr) {
      batchSizes->push_back(rows);
    }
    ++batches;
  }
  EXPECT_EQ(batches, loader.batchesPerEpoch());
  EXPECT_FALSE(loader.next().has_value()) << "an exhausted epoch stays exhausted";
  return samples;
}

std::vector<std::int64_t> allIndices(std::int64_t size) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(size));
  std::iota(all.begin(), all.end(), std::int64_t{0});
  return all;
}

TEST(DataLoaderTest, RanksTogetherSeeEverySampleExactlyOncePerEpoch) {
  constexpr std::int64_t kSize = 48;
  auto dataset = std::make_shared<IndexDataset>(kSize);
  for (int world : {1, 2, 4}) {
    for (std::int64_t epoch : {0, 1, 7}) {
      std::vector<std::int64_t> seen;
      std::int64_t batchesPerEpoch = -1;
      for (int rank = 0; rank < world; ++rank) {
        DataLoader loader(dataset, loaderOptions(5, rank, world));
        if (rank == 0) {
          batchesPerEpoch = loader.batchesPerEpoch();
        }
        EXPECT_EQ(loader.batchesPerEpoch(), batchesPerEpoch) << "every rank runs the same number of steps";
        EXPECT_EQ(loader.samplesPerRank(), kSize / world);
        const std::vector<std::int64_t> shard = drainEpoch(loader, epoch, nullptr);
        EXPECT_EQ(shard, loader.shardIndices(epoch));
        seen.insert(seen.end(), shard.begin(), shard.end());
      }
      std::sort(seen.begin(), seen.end());
      EXPECT_EQ(seen, allIndices(kSize)) << world << " ranks, epoch " << epoch;
    }
  }
}

TEST(DataLoaderTest, UnevenSizePadsByRepeatingTheFirstSamplesOfThePermutation) {
  constexpr std::int64_t kSize = 10;
  auto dataset = std::make_shared<IndexDataset>(kSize);
  std::map<std::int64_t, int> counts;
  for (int rank = 0; rank < 4; ++rank) {
    DataLoader loader(dataset, loaderOptions(2, rank, 4));
    EXPECT_EQ(loader.samplesPerRank(), 3);
    EXPECT_EQ(loader.batchesPerEpoch(), 2);
    std::vector<std::int64_t> batchSizes;
    for (std::int64_t index : drainEpoch(loader, 3, &batchSizes)) {
      counts[index]++;
    }
    EXPECT_EQ(batchSizes, (std::vector<std::int64_t>{2, 1}));
  }
  ASSERT_EQ(counts.size(), static_cast<std::size_t>(kSize)) << "every sample is seen";
  int repeated = 0;
  for (const auto& [index, count] : counts) {
    EXPECT_LE(count, 2);
    repeated += count - 1;
  }
  EXPECT_EQ(repeated, 2) << "12 slots for 10 samples";
}

TEST(DataLoaderTest, DropLastGivesEveryRankTheSameFullBatchesAndNoRepeats) {
  constexpr std::int64_t kSize = 43;
  auto dataset = std::make_shared<IndexDataset>(kSize);
  std::vector<std::int64_t> seen;
  for (int rank = 0; rank < 4; ++rank) {
    DataLoader loader(dataset, loaderOptions(3, rank, 4, true));
    EXPECT_EQ(loader.batchesPerEpoch(), 3);  // 43 / 4 = 10 samples per rank, 3 full batches of 3
    std::vector<std::int64_t> batchSizes;
    const std::vector<std::int64_t> shard = drainEpoch(loader, 0, &batchSizes);
    EXPECT_EQ(batchSizes, (std::vector<std::int64_t>{3, 3, 3}));
    seen.insert(seen.end(), shard.begin(), shard.end());
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "no sample twice";
  EXPECT_EQ(seen.size(), 36u);
  EXPECT_THAT(errorOf([&] { DataLoader tooSmall(dataset, loaderOptions(16, 0, 4, true)); }),
              AllOf(HasSubstr("43 samples"), HasSubstr("full batch of 16"), HasSubstr("4 ranks")));
}

TEST(DataLoaderTest, EpochsShuffleDifferentlyAndSeedsReproduce) {
  auto dataset = std::make_shared<IndexDataset>(100);
  DataLoader a(dataset, loaderOptions(8, 1, 2));
  DataLoader b(dataset, loaderOptions(8, 1, 2));
  DataLoaderOptions otherSeed = loaderOptions(8, 1, 2);
  otherSeed.seed = 99;
  DataLoader c(dataset, otherSeed);
  EXPECT_EQ(a.shardIndices(0), b.shardIndices(0));
  EXPECT_EQ(a.shardIndices(5), b.shardIndices(5));
  EXPECT_NE(a.shardIndices(0), a.shardIndices(1));
  EXPECT_NE(a.shardIndices(0), c.shardIndices(0));
  const std::vector<std::int64_t> first = drainEpoch(a, 2, nullptr);
  EXPECT_EQ(first, drainEpoch(b, 2, nullptr));
  EXPECT_NE(first, drainEpoch(a, 3, nullptr));
  EXPECT_EQ(first, drainEpoch(a, 2, nullptr)) << "re-running an epoch gives its order again";

  DataLoaderOptions sequential = loaderOptions(8, 1, 2);
  sequential.shuffle = false;
  DataLoader ordered(dataset, sequential);
  const std::vector<std::int64_t> shard = ordered.shardIndices(4);
  ASSERT_EQ(shard.size(), 50u);
  for (std::size_t k = 0; k < shard.size(); ++k) {
    EXPECT_EQ(shard[k], static_cast<std::int64_t>(2 * k + 1));
  }
}

TEST(DataLoaderTest, StartEpochSetsTheDatasetEpoch) {
  auto dataset = std::make_shared<IndexDataset>(8);
  DataLoader loader(dataset, loaderOptions(4, 0, 1));
  loader.startEpoch(6);
  EXPECT_EQ(dataset->epoch(), 6);
}

TEST(DataLoaderTest, SynchronousModeMatchesPrefetching) {
  auto dataset = std::make_shared<IndexDataset>(30);
  DataLoaderOptions options = loaderOptions(4, 0, 1);
  DataLoader prefetching(dataset, options);
  options.prefetch = 0;
  DataLoader synchronous(dataset, options);
  EXPECT_EQ(drainEpoch(prefetching, 1, nullptr), drainEpoch(synchronous, 1, nullptr));
}

TEST(DataLoaderTest, QueueIsBoundedByThePrefetchDepth) {
  auto dataset = std::make_shared<IndexDataset>(100);
  DataLoaderOptions options = loaderOptions(5, 0, 1);
  options.prefetch = 2;
  DataLoader loader(dataset, options);
  loader.startEpoch(0);
  // Give the worker time to run ahead; it must stop after filling the queue and wait.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_LE(dataset->gets(), 2 * 5);
  EXPECT_TRUE(loader.next().has_value());
}

TEST(DataLoaderTest, DestroyingMidEpochStopsTheWorkerPromptly) {
  // 20 ms per sample, 64 per batch: a batch takes over a second, so a prompt exit proves the worker stops between
  // samples rather than finishing the epoch.
  auto slow = std::make_shared<IndexDataset>(1000, std::chrono::milliseconds(20));
  const Clock::time_point start = Clock::now();
  {
    DataLoader loader(slow, loaderOptions(64, 0, 1));
    loader.startEpoch(0);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(800));
  EXPECT_LT(slow->gets(), 64);

  auto fast = std::make_shared<IndexDataset>(200);
  {
    DataLoader loader(fast, loaderOptions(4, 0, 1));
    loader.startEpoch(0);
    ASSERT_TRUE(loader.next().has_value());  // the worker is now blocked on a full queue
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  { DataLoader neverStarted(fast, loaderOptions(4, 0, 1)); }
}

TEST(DataLoaderTest, RestartingAnEpochMidwayAbandonsTheOldOne) {
  auto dataset = std::make_shared<IndexDataset>(40);
  DataLoader loader(dataset, loaderOptions(4, 0, 1));
  loader.startEpoch(0);
  ASSERT_TRUE(loader.next().has_value());
  const std::vector<std::int64_t> second = drainEpoch(loader, 1, nullptr);
  EXPECT_EQ(second, loader.shardIndices(1));
}

TEST(DataLoaderTest, WorkerErrorsAreRethrownInNext) {
  auto dataset = std::make_shared<IndexDataset>(20, std::chrono::milliseconds(0), 5);
  DataLoaderOptions options = loaderOptions(2, 0, 1);
  options.shuffle = false;
  for (int prefetch : {2, 0}) {
    options.prefetch = prefetch;
    DataLoader loader(dataset, options);
    loader.startEpoch(0);
    ASSERT_TRUE(loader.next().has_value()) << "batches before the failure arrive";
    ASSERT_TRUE(loader.next().has_value());
    EXPECT_THAT(errorOf([&] { loader.next(); }), HasSubstr("sample 5 is unreadable")) << "prefetch " << prefetch;
  }
}

TEST(DataLoaderTest, InvalidUseIsReported) {
  auto dataset = std::make_shared<IndexDataset>(20);
  EXPECT_THAT(errorOf([&] { DataLoader loader(dataset, loaderOptions(4, 2, 2)); }),
              HasSubstr("rank 2 is outside a world of 2 ranks"));
  EXPECT_THAT(errorOf([&] { DataLoader loader(dataset, loaderOptions(0, 0, 1)); }), HasSubstr("batch size"));
  DataLoader loader(dataset, loaderOptions(4, 0, 1));
  EXPECT_THAT(errorOf([&] { loader.next(); }), HasSubstr("before startEpoch"));
}

TEST(DataLoaderTest, BatchesOfASyntheticDatasetMatchItsSamples) {
  SyntheticDatasetOptions options;
  options.sampleShape = {3, 4, 4};
  options.numSamples = 10;
  auto dataset = std::make_shared<SyntheticDataset>(options);
  DataLoader loader(dataset, loaderOptions(4, 0, 1));
  loader.startEpoch(0);
  std::optional<Batch> batch = loader.next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->inputs.shape(), (Shape{4, 3, 4, 4}));
  std::vector<float> image(48);
  std::int64_t label = 0;
  for (std::int64_t r = 0; r < 4; ++r) {
    dataset->get(batch->samples[static_cast<std::size_t>(r)], image.data(), &label);
    EXPECT_EQ(batch->targets.data<std::int64_t>()[r], label);
    EXPECT_TRUE(std::equal(image.begin(), image.end(), batch->inputs.data<float>() + r * 48));
  }
}

}  // namespace
}  // namespace strata
