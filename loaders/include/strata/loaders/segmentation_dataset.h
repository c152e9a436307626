#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "strata/loaders/dataset.h"

namespace strata {

// Pixels of a mask that no class owns (object boundaries in PASCAL VOC): ignored by the loss and the metric.
inline constexpr std::int64_t kIgnoredPixel = 255;

// Note [Segmentation folders]: images and their per-pixel class masks: DIR/images/NAME.{jpg,png} with
// DIR/masks/NAME.png (a grayscale or palette PNG whose values are class indices, 255 for pixels to ignore), or
// DIR/train and DIR/val (or DIR/test) each laid out so. A single folder gives every 20th pair to the test split.
// Images and masks are decoded when read, fitted together to the model's input (the image antialiased, the mask by
// the nearest pixel: Note [Fitting images]) and the image normalised as a photo. A mask whose size differs from
// its image, or a value that is neither a class of the model nor 255, is an error naming the files and the pixel.
struct SegmentationOptions {
  std::filesystem::path directory;
  DatasetSplit split = DatasetSplit::Train;
  Shape sampleShape;         // {C, H, W}: the model's input
  std::int64_t classes = 0;  // the model's (its scores' axis 1)
  bool augment = false;      // training only: a random horizontal flip of image and mask together, per epoch
  std::uint64_t seed = 0;
};

class SegmentationDataset : public Dataset {
 public:
  explicit SegmentationDataset(const SegmentationOptions& options);

  std::int64_t size() const override { return static_cast<std::int64_t>(images_.size()); }
  Shape sampleShape() const override { return options_.sampleShape; }
  Shape targetShape() const override { return {options_.sampleShape[1], options_.sampleShape[2]}; }
  Task task() const override { return Task::Segmentation; }
  std::int64_t numClasses() const override { return options_.classes; }
  void get(std::int64_t index, void* input, std::int64_t* target) const override;
  void setEpoch(std::int64_t epoch) override { epoch_.store(epoch); }
  std::string description() const override { return description_; }

 private:
  SegmentationOptions options_;
  std::vector<std::filesystem::path> images_;
  std::vector<std::filesystem::path> masks_;
  std::string description_;
  std::atomic<std::int64_t> epoch_{0};
};

}  // namespace strata
