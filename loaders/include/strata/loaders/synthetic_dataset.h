#pragma once

#include <cstdint>
#include <string>

#include "strata/loaders/dataset.h"

namespace strata {

struct SyntheticDatasetOptions {
  Shape sampleShape = {1, 28, 28};
  std::int64_t numClasses = 10;
  std::int64_t numSamples = 1024;
  std::uint64_t seed = 0;
  // A class per pixel ({C, H, W} samples, [H, W] targets: `--data synthetic:segmentation`) instead of one per sample.
  bool perPixelLabels = false;
};

// Deterministic random data shaped like a model's input: sample i is a function of (seed, i) only, so any order of
// access, any thread and any rank sees the same values. Pixels are standard-normal (rounded to 2^16 values, Note
// [Synthetic pixels]); labels (one per sample, or one per pixel) uniform in [0, numClasses). For benchmarks and tests
// where no real data is needed.
class SyntheticDataset : public Dataset {
 public:
  explicit SyntheticDataset(const SyntheticDatasetOptions& options);

  std::int64_t size() const override { return options_.numSamples; }
  Shape sampleShape() const override { return options_.sampleShape; }
  std::int64_t numClasses() const override { return options_.numClasses; }
  Shape targetShape() const override;
  Task task() const override { return options_.perPixelLabels ? Task::Segmentation : Task::Classification; }
  void get(std::int64_t index, void* input, std::int64_t* label) const override;
  std::string description() const override;

 private:
  SyntheticDatasetOptions options_;
};

}  // namespace strata
