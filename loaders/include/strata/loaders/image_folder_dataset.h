#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "strata/loaders/dataset.h"

namespace strata {

// Note [Image folders]: users' own photos, as torchvision's ImageFolder reads them: DIR holds one folder per class
// (classes in name order are labels 0, 1, ...; a class folder's images are found recursively), or DIR/train and
// DIR/val (or DIR/test) each hold such folders. A single set of folders gives every 20th image of each class (in path
// order) to the test split. JPEG and PNG files are decoded when a sample is read (libjpeg-turbo, libpng), fitted to
// the model's input (Note [Fitting images]) and normalised with ImageNet's channel means and deviations; other
// files are left out and counted in the description. An undecodable image is an error naming the file.
struct ImageFolderOptions {
  std::filesystem::path directory;
  DatasetSplit split = DatasetSplit::Train;
  Shape sampleShape;     // {C, H, W}: the model's input, C 1 or 3
  bool augment = false;  // training only: a random horizontal flip, re-drawn every epoch from `seed`
  std::uint64_t seed = 0;
};

class ImageFolderDataset : public Dataset {
 public:
  explicit ImageFolderDataset(const ImageFolderOptions& options);

  std::int64_t size() const override { return static_cast<std::int64_t>(files_.size()); }
  Shape sampleShape() const override { return options_.sampleShape; }
  std::int64_t numClasses() const override { return static_cast<std::int64_t>(classes_.size()); }
  void get(std::int64_t index, void* input, std::int64_t* label) const override;
  void setEpoch(std::int64_t epoch) override { epoch_.store(epoch); }
  std::string description() const override { return description_; }

  const std::vector<std::string>& classNames() const { return classes_; }

 private:
  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::vector<std::filesystem::path> files_;
  std::vector<std::int64_t> labels_;
  std::string description_;
  std::atomic<std::int64_t> epoch_{0};
};

// The normalisation of photos (ImageNet's means and deviations; one channel: their averages), shared with the
// segmentation data set: value = (pixel / 255 - mean[c]) / deviation[c].
void normalisePhoto(std::vector<float>& chw, std::int64_t channels);

// The split of files listed for one folder when there is no train/val layout: every 20th to the test split.
bool inTestSplit(std::size_t indexInFolder);

// DIR's split folder (DIR/train, DIR/val or DIR/test) when DIR has that layout, else DIR itself; `split` says
// whether the caller must hold out its own test files (no layout).
std::filesystem::path splitDirectory(const std::filesystem::path& directory, DatasetSplit split, bool* holdOut,
                                     const std::string& what);

}  // namespace strata
