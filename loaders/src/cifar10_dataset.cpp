#include "strata/loaders/cifar10_dataset.h"

#include <algorithm>
#include <array>

#include <fmt/ranges.h>

#include "dataset_files.h"
#include "random_stream.h"
#include "strata/error.h"

namespace strata {
namespace fs = std::filesystem;
namespace {

constexpr std::array<float, 3> kMean = {0.4914f, 0.4822f, 0.4465f};
constexpr std::array<float, 3> kStd = {0.2470f, 0.2435f, 0.2616f};

std::vector<std::string> splitFiles(DatasetSplit split) {
  if (split == DatasetSplit::Test) {
    return {"test_batch.bin"};
  }
  std::vector<std::string> names;
  for (int i = 1; i <= 5; ++i) {
    names.push_back(fmt::format("data_batch_{}.bin", i));
  }
  return names;
}

}  // namespace

Cifar10Dataset::Cifar10Dataset(const Cifar10DatasetOptions& options) : options_(options) {
  const std::string what = fmt::format("CIFAR-10 {}", datasetSplitName(options.split));
  requireDatasetDirectory(options.directory, what);
  // The official archive unpacks into cifar-10-batches-bin/; accept its parent too.
  fs::path directory = options.directory;
  std::error_code ec;
  if (fs::is_directory(directory / "cifar-10-batches-bin", ec)) {
    directory /= "cifar-10-batches-bin";
  }
  description_ = fmt::format("{} ({})", what, directory.string());

  const std::vector<std::string> names = splitFiles(options.split);
  std::vector<std::string> missing;
  for (const std::string& name : names) {
    if (!fs::is_regular_file(directory / name, ec)) {
      missing.push_back(name);
    }
  }
  STRATA_CHECK(missing.empty(), "{}: missing file(s) {} in {} (expected {})", what, fmt::join(missing, ", "),
               directory.string(), fmt::join(names, ", "));
  for (const std::string& name : names) {
    readBatch(directory / name);
  }
}

void Cifar10Dataset::readBatch(const fs::path& file) {
  const std::vector<std::uint8_t> bytes = readDatasetFile(file);
  const auto size = static_cast<std::int64_t>(bytes.size());
  STRATA_CHECK(size > 0, "CIFAR-10 file {} is empty", file.string());
  STRATA_CHECK(size % kRecordBytes == 0,
               "CIFAR-10 file {} is truncated or corrupt: its {} bytes are not a whole number of {}-byte records "
               "(expected {} bytes for {} records, {} bytes left over)",
               file.string(), size, kRecordBytes, (size / kRecordBytes + 1) * kRecordBytes, size / kRecordBytes + 1,
               size % kRecordBytes);
  const std::int64_t records = size / kRecordBytes;
  const std::size_t firstPixel = pixels_.size();
  pixels_.resize(firstPixel + static_cast<std::size_t>(records * kPixels));
  labels_.reserve(labels_.size() + static_cast<std::size_t>(records));
  for (std::int64_t r = 0; r < records; ++r) {
    const std::uint8_t* record = bytes.data() + r * kRecordBytes;
    STRATA_CHECK(record[0] < kClasses, "CIFAR-10 file {}: label {} of record {} is out of range [0, {})", file.string(),
                 record[0], r, kClasses);
    labels_.push_back(record[0]);
    std::copy(record + 1, record + kRecordBytes,
              pixels_.begin() + static_cast<std::ptrdiff_t>(firstPixel) + static_cast<std::ptrdiff_t>(r * kPixels));
  }
}

void Cifar10Dataset::get(std::int64_t index, void* input, std::int64_t* label) const {
  checkIndex(index);
  auto* image = static_cast<float*>(input);
  const std::uint8_t* src = pixels_.data() + index * kPixels;
  *label = labels_[static_cast<std::size_t>(index)];
  const bool augment = options_.augment && options_.split == DatasetSplit::Train;
  std::int64_t dy = kPadding;
  std::int64_t dx = kPadding;
  bool flip = false;
  if (augment) {
    // Keyed by (seed, epoch, index): independent of visiting order, thread and rank.
    RandomStream rng = RandomStream::keyed(
        {options_.seed, static_cast<std::uint64_t>(epoch_.load()), static_cast<std::uint64_t>(index)});
    dy = static_cast<std::int64_t>(rng.below(2 * kPadding + 1));
    dx = static_cast<std::int64_t>(rng.below(2 * kPadding + 1));
    flip = (rng.next() & 1) != 0;
  }
  for (std::int64_t c = 0; c < kChannels; ++c) {
    const float scale = 1.0f / (255.0f * kStd[static_cast<std::size_t>(c)]);
    const float shift = -kMean[static_cast<std::size_t>(c)] / kStd[static_cast<std::size_t>(c)];
    const std::uint8_t* plane = src + c * kSide * kSide;
    float* out = image + c * kSide * kSide;
    for (std::int64_t y = 0; y < kSide; ++y) {
      // Crop of the zero-padded image, then flip of the crop (torchvision's RandomCrop, RandomHorizontalFlip).
      const std::int64_t sy = y + dy - kPadding;
      for (std::int64_t x = 0; x < kSide; ++x) {
        const std::int64_t sx = (flip ? kSide - 1 - x : x) + dx - kPadding;
        const bool inside = sy >= 0 && sy < kSide && sx >= 0 && sx < kSide;
        const float value = inside ? static_cast<float>(plane[sy * kSide + sx]) : 0.0f;
        out[y * kSide + x] = value * scale + shift;
      }
    }
  }
}

}  // namespace strata
