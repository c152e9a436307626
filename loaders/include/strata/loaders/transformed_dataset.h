#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/loaders/dataset.h"

namespace strata {

struct TransformedDatasetOptions {
  // {C, H, W} of the samples produced. C must equal the inner data set's channels, or the inner data set must have
  // one channel (which is repeated, e.g. grayscale Fashion-MNIST into an RGB model).
  Shape targetShape;
};

// Adapts another data set's {C, H, W} samples to a model's input: bilinear resize (half-pixel centres, no corner
// alignment, as torch.nn.functional.interpolate(mode="bilinear", align_corners=False)) and channel repeat.
// Resizing after normalisation equals normalising after resizing, since bilinear weights sum to one.
class TransformedDataset : public Dataset {
 public:
  TransformedDataset(std::shared_ptr<Dataset> inner, const TransformedDatasetOptions& options);

  std::int64_t size() const override { return inner_->size(); }
  Shape sampleShape() const override { return options_.targetShape; }
  std::int64_t numClasses() const override { return inner_->numClasses(); }
  void get(std::int64_t index, void* input, std::int64_t* label) const override;
  void setEpoch(std::int64_t epoch) override { inner_->setEpoch(epoch); }
  std::string description() const override;

  const Dataset& inner() const { return *inner_; }

 private:
  // Source taps of one output coordinate: value = (1 - weight) * src[low] + weight * src[high].
  struct Tap {
    std::int64_t low = 0;
    std::int64_t high = 0;
    float weight = 0.0f;
  };
  static std::vector<Tap> makeTaps(std::int64_t inSize, std::int64_t outSize);

  std::shared_ptr<Dataset> inner_;
  TransformedDatasetOptions options_;
  Shape innerShape_;
  std::vector<Tap> rowTaps_;
  std::vector<Tap> colTaps_;
};

}  // namespace strata
