#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "strata/loaders/dataset.h"

namespace strata {

struct Cifar10DatasetOptions {
  // Holds data_batch_1..5.bin and test_batch.bin, directly or in a cifar-10-batches-bin subdirectory.
  std::filesystem::path directory;
  DatasetSplit split = DatasetSplit::Train;
  // Random crop 32 with padding 4 (zero pixels before normalisation, as torchvision pads) and horizontal flip with
  // probability 1/2; drawn per sample from (seed, epoch, index), so every epoch differs and runs are reproducible.
  bool augment = false;
  std::uint64_t seed = 0;
};

// CIFAR-10 binary version: records of 1 label byte and 3072 pixel bytes (3 x 32 x 32, CHW). Samples are
// {3, 32, 32}, normalised per channel with mean (0.4914, 0.4822, 0.4465) and std (0.2470, 0.2435, 0.2616).
class Cifar10Dataset : public Dataset {
 public:
  explicit Cifar10Dataset(const Cifar10DatasetOptions& options);

  std::int64_t size() const override { return static_cast<std::int64_t>(labels_.size()); }
  Shape sampleShape() const override { return {kChannels, kSide, kSide}; }
  std::int64_t numClasses() const override { return kClasses; }
  void get(std::int64_t index, void* input, std::int64_t* label) const override;
  void setEpoch(std::int64_t epoch) override { epoch_.store(epoch); }
  std::string description() const override { return description_; }

  static constexpr std::int64_t kClasses = 10;
  static constexpr std::int64_t kChannels = 3;
  static constexpr std::int64_t kSide = 32;
  static constexpr std::int64_t kPixels = kChannels * kSide * kSide;
  static constexpr std::int64_t kRecordBytes = 1 + kPixels;
  static constexpr std::int64_t kPadding = 4;

 private:
  void readBatch(const std::filesystem::path& file);

  Cifar10DatasetOptions options_;
  std::string description_;
  std::atomic<std::int64_t> epoch_{0};
  std::vector<std::uint8_t> pixels_;
  std::vector<std::uint8_t> labels_;
};

}  // namespace strata
