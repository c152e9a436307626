#include "strata/loaders/segmentation_dataset.h"

#include <algorithm>

#include <fmt/format.h>

#include "image_codec.h"
#include "image_resample.h"
#include "random_stream.h"
#include "strata/error.h"
#include "strata/loaders/image_folder_dataset.h"

namespace strata {
namespace fs = std::filesystem;

SegmentationDataset::SegmentationDataset(const SegmentationOptions& options) : options_(options) {
  const std::string dir = options.directory.string();
  STRATA_CHECK(options.sampleShape.size() == 3 && (options.sampleShape[0] == 1 || options.sampleShape[0] == 3),
               "segmentation {}: the model's input is {}, but photos fit [1 or 3, H, W] inputs", dir,
               shapeToString(options.sampleShape));
  STRATA_CHECK(options.classes > 0, "segmentation {}: the model's class count is unknown", dir);
  bool holdOut = false;
  const fs::path root = splitDirectory(options.directory, options.split, &holdOut, "segmentation");
  std::error_code ec;
  STRATA_CHECK(fs::is_directory(root / "images", ec) && fs::is_directory(root / "masks", ec),
               "segmentation {}: expected {}/images/NAME.jpg|png and {}/masks/NAME.png", root.string(), root.string(),
               root.string());
  std::vector<fs::path> images;
  for (const fs::directory_entry& entry : fs::directory_iterator(root / "images")) {
    if (entry.is_regular_file() && isImageFile(entry.path())) {
      images.push_back(entry.path());
    }
  }
  std::sort(images.begin(), images.end());
  STRATA_CHECK(!images.empty(), "segmentation {}: no JPEG or PNG image in {}", root.string(),
               (root / "images").string());
  for (std::size_t i = 0; i < images.size(); ++i) {
    const fs::path mask = root / "masks" / (images[i].stem().string() + ".png");
    STRATA_CHECK(fs::exists(mask, ec), "segmentation {}: image {} has no mask {}", root.string(), images[i].string(),
                 mask.string());
    if (!holdOut || inTestSplit(i) == (options.split == DatasetSplit::Test)) {
      images_.push_back(images[i]);
      masks_.push_back(mask);
    }
  }
  STRATA_CHECK(!images_.empty(), "segmentation {}: no pair for the {} split (every 20th pair is a test pair)",
               root.string(), datasetSplitName(options.split));
  description_ = fmt::format("segmentation {} ({}, {} images with masks, {} classes)", datasetSplitName(options.split),
                             root.string(), images_.size(), options.classes);
}

void SegmentationDataset::get(std::int64_t index, void* input, std::int64_t* target) const {
  checkIndex(index);
  const Shape& shape = options_.sampleShape;
  const fs::path& imageFile = images_[static_cast<std::size_t>(index)];
  const fs::path& maskFile = masks_[static_cast<std::size_t>(index)];
  const DecodedImage image = decodeImage(imageFile, static_cast<int>(shape[0]));
  const DecodedImage mask = decodeMask(maskFile);
  if (mask.width != image.width || mask.height != image.height) {
    fail("segmentation: mask {} is {}x{} but its image {} is {}x{} (width x height)", maskFile.string(), mask.width,
         mask.height, imageFile.string(), image.width, image.height);
  }
  for (std::int64_t p = 0; p < mask.width * mask.height; ++p) {
    const std::int64_t value = mask.pixels[static_cast<std::size_t>(p)];
    if (value >= options_.classes && value != kIgnoredPixel) {
      fail(
          "segmentation: mask {} has class {} at pixel ({}, {}) (x, y), but the model has {} classes (255 marks "
          "pixels to ignore)",
          maskFile.string(), value, p % mask.width, p / mask.width, options_.classes);
    }
  }
  std::vector<float> chw = fitImage(image, shape[1], shape[2]);
  normalisePhoto(chw, shape[0]);
  std::vector<std::uint8_t> classes = fitMask(mask, shape[1], shape[2]);
  bool flip = false;
  if (options_.augment) {
    RandomStream random = RandomStream::keyed(
        {options_.seed, static_cast<std::uint64_t>(epoch_.load()), static_cast<std::uint64_t>(index)});
    flip = random.below(2) == 1;
  }
  if (flip) {
    for (std::int64_t row = 0; row < shape[0] * shape[1]; ++row) {
      std::reverse(chw.begin() + row * shape[2], chw.begin() + (row + 1) * shape[2]);
    }
    for (std::int64_t row = 0; row < shape[1]; ++row) {
      std::reverse(classes.begin() + row * shape[2], classes.begin() + (row + 1) * shape[2]);
    }
  }
  std::copy(chw.begin(), chw.end(), static_cast<float*>(input));
  std::copy(classes.begin(), classes.end(), target);
}

}  // namespace strata
