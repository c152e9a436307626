#include "strata/loaders/image_folder_dataset.h"

#include <algorithm>

#include <fmt/format.h>

#include "image_codec.h"
#include "image_resample.h"
#include "random_stream.h"
#include "strata/error.h"

namespace strata {
namespace fs = std::filesystem;

namespace {

constexpr float kMean[3] = {0.485f, 0.456f, 0.406f};
constexpr float kDeviation[3] = {0.229f, 0.224f, 0.225f};
constexpr std::size_t kTestEvery = 20;

}  // namespace

void normalisePhoto(std::vector<float>& chw, std::int64_t channels) {
  const std::size_t plane = chw.size() / static_cast<std::size_t>(channels);
  for (std::int64_t c = 0; c < channels; ++c) {
    const float mean = channels == 3 ? kMean[c] : (kMean[0] + kMean[1] + kMean[2]) / 3;
    const float deviation = channels == 3 ? kDeviation[c] : (kDeviation[0] + kDeviation[1] + kDeviation[2]) / 3;
    float* p = chw.data() + static_cast<std::size_t>(c) * plane;
    for (std::size_t i = 0; i < plane; ++i) {
      p[i] = (p[i] - mean) / deviation;
    }
  }
}

bool inTestSplit(std::size_t indexInFolder) {
  return indexInFolder % kTestEvery == kTestEvery - 1;
}

fs::path splitDirectory(const fs::path& directory, DatasetSplit split, bool* holdOut, const std::string& what) {
  std::error_code ec;
  STRATA_CHECK(fs::is_directory(directory, ec), "{} {}: no such directory", what, directory.string());
  if (fs::is_directory(directory / "train", ec)) {
    *holdOut = false;
    if (split == DatasetSplit::Train) {
      return directory / "train";
    }
    for (const char* name : {"val", "test"}) {
      if (fs::is_directory(directory / name, ec)) {
        return directory / name;
      }
    }
    fail("{} {}: it has a train folder but no val or test folder beside it", what, directory.string());
  }
  *holdOut = true;
  return directory;
}

ImageFolderDataset::ImageFolderDataset(const ImageFolderOptions& options) : options_(options) {
  const std::string dir = options.directory.string();
  STRATA_CHECK(options.sampleShape.size() == 3 && (options.sampleShape[0] == 1 || options.sampleShape[0] == 3),
               "images {}: the model's input is {}, but photos fit [1 or 3, H, W] inputs", dir,
               shapeToString(options.sampleShape));
  bool holdOut = false;
  const fs::path root = splitDirectory(options.directory, options.split, &holdOut, "images");
  std::vector<fs::path> classDirs;
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) {
      classDirs.push_back(entry.path());
    }
  }
  std::sort(classDirs.begin(), classDirs.end());
  STRATA_CHECK(!classDirs.empty(), "images {}: no class folders (expected {}/<class>/<image>.jpg)", root.string(),
               root.string());
  std::size_t ignored = 0;
  for (std::size_t c = 0; c < classDirs.size(); ++c) {
    classes_.push_back(classDirs[c].filename().string());
    std::vector<fs::path> images;
    for (const fs::directory_entry& entry : fs::recursive_directory_iterator(classDirs[c])) {
      if (!entry.is_regular_file()) {
        continue;
      }
      if (isImageFile(entry.path())) {
        images.push_back(entry.path());
      } else {
        ++ignored;
      }
    }
    std::sort(images.begin(), images.end());
    STRATA_CHECK(!images.empty(), "images {}: class folder '{}' holds no JPEG or PNG file", root.string(),
                 classes_.back());
    for (std::size_t i = 0; i < images.size(); ++i) {
      if (!holdOut || inTestSplit(i) == (options.split == DatasetSplit::Test)) {
        files_.push_back(images[i]);
        labels_.push_back(static_cast<std::int64_t>(c));
      }
    }
  }
  STRATA_CHECK(!files_.empty(), "images {}: no image for the {} split (every 20th image of a class is a test image)",
               root.string(), datasetSplitName(options.split));
  description_ =
      fmt::format("images {} ({}, {} images of {} classes{})", datasetSplitName(options.split), root.string(),
                  files_.size(), classes_.size(), ignored > 0 ? fmt::format("; {} other files left out", ignored) : "");
}

void ImageFolderDataset::get(std::int64_t index, void* input, std::int64_t* label) const {
  checkIndex(index);
  const Shape& shape = options_.sampleShape;
  const fs::path& file = files_[static_cast<std::size_t>(index)];
  std::vector<float> chw = fitImage(decodeImage(file, static_cast<int>(shape[0])), shape[1], shape[2]);
  normalisePhoto(chw, shape[0]);
  if (options_.augment) {
    RandomStream random = RandomStream::keyed(
        {options_.seed, static_cast<std::uint64_t>(epoch_.load()), static_cast<std::uint64_t>(index)});
    if (random.below(2) == 1) {
      for (std::int64_t row = 0; row < shape[0] * shape[1]; ++row) {
        std::reverse(chw.begin() + row * shape[2], chw.begin() + (row + 1) * shape[2]);
      }
    }
  }
  std::copy(chw.begin(), chw.end(), static_cast<float*>(input));
  *label = labels_[static_cast<std::size_t>(index)];
}

}  // namespace strata
