#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "strata/loaders/dataset.h"

namespace strata {

// Which IDX data set a directory holds; it sets the name in messages and the normalisation statistics.
enum class IdxFlavor { Mnist, FashionMnist };

struct IdxDatasetOptions {
  std::filesystem::path directory;
  DatasetSplit split = DatasetSplit::Train;
  IdxFlavor flavor = IdxFlavor::FashionMnist;
};

// MNIST / Fashion-MNIST in the IDX format: {train,t10k}-{images-idx3,labels-idx1}-ubyte, each raw or gzipped
// (".gz"), also accepting the "train-images.idx3-ubyte" spelling. Pixels are kept as bytes and normalised in get()
// to (x / 255 - mean) / std with the data set's standard statistics (MNIST 0.1307 / 0.3081, Fashion-MNIST
// 0.2860 / 0.3530). Samples are {1, rows, cols}; 10 classes.
class IdxDataset : public Dataset {
 public:
  explicit IdxDataset(const IdxDatasetOptions& options);

  std::int64_t size() const override { return count_; }
  Shape sampleShape() const override { return {1, rows_, cols_}; }
  std::int64_t numClasses() const override { return kClasses; }
  void get(std::int64_t index, void* input, std::int64_t* label) const override;
  std::string description() const override { return description_; }

  // The files this split is read from (for messages and tests).
  const std::filesystem::path& imagesFile() const { return imagesFile_; }
  const std::filesystem::path& labelsFile() const { return labelsFile_; }

  static constexpr std::int64_t kClasses = 10;
  static constexpr std::uint32_t kImagesMagic = 2051;  // 0x00000803: unsigned bytes, 3 dimensions
  static constexpr std::uint32_t kLabelsMagic = 2049;  // 0x00000801: unsigned bytes, 1 dimension

 private:
  void readImages();
  void readLabels();

  std::string description_;
  std::filesystem::path imagesFile_;
  std::filesystem::path labelsFile_;
  float mean_ = 0.0f;
  float std_ = 1.0f;
  std::int64_t count_ = 0;
  std::int64_t rows_ = 0;
  std::int64_t cols_ = 0;
  std::vector<std::uint8_t> pixels_;
  std::vector<std::uint8_t> labels_;
};

}  // namespace strata
