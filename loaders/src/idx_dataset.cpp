#include "strata/loaders/idx_dataset.h"

#include "dataset_files.h"
#include "strata/error.h"

namespace strata {
namespace fs = std::filesystem;
namespace {

constexpr std::size_t kImagesHeaderBytes = 16;  // magic, count, rows, cols
constexpr std::size_t kLabelsHeaderBytes = 8;   // magic, count

std::uint32_t readBigEndian32(const std::vector<std::uint8_t>& bytes, std::size_t offset) {
  return (std::uint32_t{bytes[offset]} << 24) | (std::uint32_t{bytes[offset + 1]} << 16) |
         (std::uint32_t{bytes[offset + 2]} << 8) | std::uint32_t{bytes[offset + 3]};
}

// The names a split's file may have: "<prefix>-<kind>-ubyte" (Debian, LeCun's site) or "<prefix>-<kind-with-dot>"
// (some mirrors), each raw or gzipped.
std::vector<std::string> candidateNames(const std::string& prefix, const std::string& kind) {
  std::string dotted = kind;
  dotted[dotted.find('-')] = '.';
  const std::string names[] = {prefix + "-" + kind + "-ubyte", prefix + "-" + dotted + "-ubyte"};
  return {names[0] + ".gz", names[0], names[1] + ".gz", names[1]};
}

}  // namespace

IdxDataset::IdxDataset(const IdxDatasetOptions& options) {
  const bool fashion = options.flavor == IdxFlavor::FashionMnist;
  const std::string name = fashion ? "Fashion-MNIST" : "MNIST";
  description_ = fmt::format("{} {} ({})", name, datasetSplitName(options.split), options.directory.string());
  mean_ = fashion ? 0.2860f : 0.1307f;
  std_ = fashion ? 0.3530f : 0.3081f;

  const std::string prefix = options.split == DatasetSplit::Train ? "train" : "t10k";
  const std::string what = fmt::format("{} {}", name, datasetSplitName(options.split));
  imagesFile_ = findDatasetFile(options.directory, candidateNames(prefix, "images-idx3"), what + " images");
  labelsFile_ = findDatasetFile(options.directory, candidateNames(prefix, "labels-idx1"), what + " labels");
  readImages();
  readLabels();
}

void IdxDataset::readImages() {
  const std::string file = imagesFile_.string();
  pixels_ = readDatasetFile(imagesFile_);
  STRATA_CHECK(pixels_.size() >= kImagesHeaderBytes,
               "IDX images file {} is truncated: expected at least a {}-byte header, found {} bytes", file,
               kImagesHeaderBytes, pixels_.size());
  const std::uint32_t magic = readBigEndian32(pixels_, 0);
  STRATA_CHECK(magic == kImagesMagic,
               "IDX images file {} has a bad magic number: expected {} (0x{:08x}, unsigned bytes in 3 dimensions), "
               "found {} (0x{:08x})",
               file, kImagesMagic, kImagesMagic, magic, magic);
  count_ = readBigEndian32(pixels_, 4);
  rows_ = readBigEndian32(pixels_, 8);
  cols_ = readBigEndian32(pixels_, 12);
  STRATA_CHECK(rows_ > 0 && cols_ > 0 && rows_ <= 65536 && cols_ <= 65536,
               "IDX images file {} has invalid image dimensions {}x{}", file, rows_, cols_);
  // Unsigned: count < 2^32 and rows * cols <= 2^32, so the product cannot overflow.
  const std::uint64_t expected =
      kImagesHeaderBytes + static_cast<std::uint64_t>(count_) * static_cast<std::uint64_t>(rows_ * cols_);
  STRATA_CHECK(pixels_.size() >= expected,
               "IDX images file {} is truncated: {} images of {}x{} need {} bytes, found {} bytes", file, count_, rows_,
               cols_, expected, pixels_.size());
  STRATA_CHECK(pixels_.size() == expected,
               "IDX images file {} is corrupt: {} images of {}x{} need {} bytes, found {} bytes ({} trailing)", file,
               count_, rows_, cols_, expected, pixels_.size(), pixels_.size() - expected);
  // Keep only the pixels, so sample i starts at i * rows * cols.
  pixels_.erase(pixels_.begin(), pixels_.begin() + kImagesHeaderBytes);
  pixels_.shrink_to_fit();
}

void IdxDataset::readLabels() {
  const std::string file = labelsFile_.string();
  labels_ = readDatasetFile(labelsFile_);
  STRATA_CHECK(labels_.size() >= kLabelsHeaderBytes,
               "IDX labels file {} is truncated: expected at least a {}-byte header, found {} bytes", file,
               kLabelsHeaderBytes, labels_.size());
  const std::uint32_t magic = readBigEndian32(labels_, 0);
  STRATA_CHECK(magic == kLabelsMagic,
               "IDX labels file {} has a bad magic number: expected {} (0x{:08x}, unsigned bytes in 1 dimension), "
               "found {} (0x{:08x})",
               file, kLabelsMagic, kLabelsMagic, magic, magic);
  const std::int64_t count = readBigEndian32(labels_, 4);
  const std::uint64_t expected = kLabelsHeaderBytes + static_cast<std::uint64_t>(count);
  STRATA_CHECK(labels_.size() >= expected, "IDX labels file {} is truncated: {} labels need {} bytes, found {} bytes",
               file, count, expected, labels_.size());
  STRATA_CHECK(labels_.size() == expected,
               "IDX labels file {} is corrupt: {} labels need {} bytes, found {} bytes ({} trailing)", file, count,
               expected, labels_.size(), labels_.size() - expected);
  STRATA_CHECK(count == count_, "image/label count mismatch: {} holds {} images but {} holds {} labels",
               imagesFile_.string(), count_, file, count);
  labels_.erase(labels_.begin(), labels_.begin() + kLabelsHeaderBytes);
  labels_.shrink_to_fit();
  for (std::size_t i = 0; i < labels_.size(); ++i) {
    STRATA_CHECK(labels_[i] < kClasses, "IDX labels file {}: label {} of sample {} is out of range [0, {})", file,
                 labels_[i], i, kClasses);
  }
}

void IdxDataset::get(std::int64_t index, void* input, std::int64_t* label) const {
  checkIndex(index);
  auto* image = static_cast<float*>(input);
  const std::int64_t pixels = rows_ * cols_;
  const std::uint8_t* src = pixels_.data() + index * pixels;
  // (x / 255 - mean) / std as one multiply-add.
  const float scale = 1.0f / (255.0f * std_);
  const float shift = -mean_ / std_;
  for (std::int64_t i = 0; i < pixels; ++i) {
    image[i] = static_cast<float>(src[i]) * scale + shift;
  }
  *label = labels_[static_cast<std::size_t>(index)];
}

}  // namespace strata
