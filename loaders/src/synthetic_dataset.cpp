#include "strata/loaders/synthetic_dataset.h"

#include <fmt/format.h>

#include "random_stream.h"
#include "strata/error.h"

namespace strata {

SyntheticDataset::SyntheticDataset(const SyntheticDatasetOptions& options) : options_(options) {
  STRATA_CHECK(!options.sampleShape.empty(), "synthetic dataset: the sample shape is empty");
  for (std::int64_t d : options.sampleShape) {
    STRATA_CHECK(d > 0, "synthetic dataset: sample shape {} has a non-positive dimension",
                 shapeToString(options.sampleShape));
  }
  STRATA_CHECK(options.numClasses > 0, "synthetic dataset: class count must be positive, got {}", options.numClasses);
  STRATA_CHECK(options.numSamples > 0, "synthetic dataset: sample count must be positive, got {}", options.numSamples);
}

void SyntheticDataset::get(std::int64_t index, float* image, std::int64_t* label) const {
  checkIndex(index);
  RandomStream rng = RandomStream::keyed({options_.seed, static_cast<std::uint64_t>(index)});
  *label = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(options_.numClasses)));
  const std::int64_t n = numElements(options_.sampleShape);
  for (std::int64_t i = 0; i < n; ++i) {
    image[i] = rng.normal();
  }
}

std::string SyntheticDataset::description() const {
  return fmt::format("synthetic ({} samples of {}, {} classes, seed {})", options_.numSamples,
                     shapeToString(options_.sampleShape), options_.numClasses, options_.seed);
}

}  // namespace strata
