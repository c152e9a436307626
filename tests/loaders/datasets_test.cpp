#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "strata/error.h"
#include "strata/loaders/cifar10_dataset.h"
#include "strata/loaders/dataset.h"
#include "strata/loaders/idx_dataset.h"
#include "strata/loaders/synthetic_dataset.h"
#include "strata/loaders/transformed_dataset.h"
#include "test_models.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::TempDir;
using Bytes = std::vector<std::uint8_t>;

constexpr float kTolerance = 1e-5f;

void appendBigEndian32(Bytes& bytes, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    bytes.push_back(static_cast<std::uint8_t>(value >> shift));
  }
}

Bytes idxImages(std::uint32_t count, std::uint32_t rows, std::uint32_t cols, const Bytes& pixels,
                std::uint32_t magic = IdxDataset::kImagesMagic) {
  Bytes bytes;
  appendBigEndian32(bytes, magic);
  appendBigEndian32(bytes, count);
  appendBigEndian32(bytes, rows);
  appendBigEndian32(bytes, cols);
  bytes.insert(bytes.end(), pixels.begin(), pixels.end());
  return bytes;
}

Bytes idxLabels(const Bytes& labels, std::uint32_t magic = IdxDataset::kLabelsMagic) {
  Bytes bytes;
  appendBigEndian32(bytes, magic);
  appendBigEndian32(bytes, static_cast<std::uint32_t>(labels.size()));
  bytes.insert(bytes.end(), labels.begin(), labels.end());
  return bytes;
}

std::uint32_t crc32(const Bytes& bytes) {
  std::uint32_t crc = 0xffffffffu;
  for (std::uint8_t byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
  }
  return ~crc;
}

// A valid gzip file made of stored (uncompressed) deflate blocks: enough to exercise the reader's zlib path without
// linking zlib into the tests.
Bytes gzipStored(const Bytes& data) {
  Bytes out = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
  std::size_t offset = 0;
  do {
    const std::size_t length = std::min<std::size_t>(65535, data.size() - offset);
    const bool last = offset + length == data.size();
    out.push_back(last ? 1 : 0);
    out.push_back(static_cast<std::uint8_t>(length));
    out.push_back(static_cast<std::uint8_t>(length >> 8));
    out.push_back(static_cast<std::uint8_t>(~length));
    out.push_back(static_cast<std::uint8_t>(~length >> 8));
    out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(offset),
               data.begin() + static_cast<std::ptrdiff_t>(offset + length));
    offset += length;
  } while (offset < data.size());
  const std::uint32_t crc = crc32(data);
  const auto size = static_cast<std::uint32_t>(data.size());
  for (int shift = 0; shift < 32; shift += 8) {
    out.push_back(static_cast<std::uint8_t>(crc >> shift));
  }
  for (int shift = 0; shift < 32; shift += 8) {
    out.push_back(static_cast<std::uint8_t>(size >> shift));
  }
  return out;
}

void writeFile(const fs::path& file, const Bytes& bytes) {
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << file;
}

using testing::errorOf;

std::unique_ptr<Dataset> openKind(const std::string& kind, DatasetSplit split = DatasetSplit::Train) {
  DatasetSpec spec;
  spec.kind = kind;
  spec.split = split;
  return openDataset(spec);
}

// Three 2x3 images with distinct pixels 0, 10, 20, ... and labels 7, 0, 9.
const Bytes kPixels = [] {
  Bytes pixels;
  for (int i = 0; i < 18; ++i) {
    pixels.push_back(static_cast<std::uint8_t>(i * 10 + (i == 17 ? 85 : 0)));  // last pixel 255
  }
  return pixels;
}();
const Bytes kLabels = {7, 0, 9};

void writeTrainIdx(const TempDir& dir, bool gzipped) {
  const std::string suffix = gzipped ? ".gz" : "";
  const Bytes images = idxImages(3, 2, 3, kPixels);
  const Bytes labels = idxLabels(kLabels);
  writeFile(dir / ("train-images-idx3-ubyte" + suffix), gzipped ? gzipStored(images) : images);
  writeFile(dir / ("train-labels-idx1-ubyte" + suffix), gzipped ? gzipStored(labels) : labels);
}

void expectIdxSamples(const Dataset& dataset, float mean, float std) {
  ASSERT_EQ(dataset.size(), 3);
  EXPECT_EQ(dataset.sampleShape(), (Shape{1, 2, 3}));
  EXPECT_EQ(dataset.numClasses(), 10);
  std::vector<float> image(6);
  for (std::int64_t i = 0; i < 3; ++i) {
    std::int64_t label = -1;
    dataset.get(i, image.data(), &label);
    EXPECT_EQ(label, kLabels[static_cast<std::size_t>(i)]);
    for (std::size_t p = 0; p < 6; ++p) {
      const float x = kPixels[static_cast<std::size_t>(i) * 6 + p];
      EXPECT_NEAR(image[p], (x / 255.0f - mean) / std, kTolerance) << "sample " << i << " pixel " << p;
    }
  }
}

TEST(DatasetsTest, IdxRawFilesAreReadAndNormalisedWithMnistStatistics) {
  TempDir dir;
  writeTrainIdx(dir, false);
  auto dataset = openKind("mnist:" + dir.path().string());
  expectIdxSamples(*dataset, 0.1307f, 0.3081f);
  EXPECT_THAT(dataset->description(), AllOf(HasSubstr("MNIST train"), HasSubstr(dir.path().string())));
}

TEST(DatasetsTest, IdxGzippedFilesAreReadWithFashionMnistStatistics) {
  TempDir dir;
  writeTrainIdx(dir, true);
  auto dataset = openKind("fashion-mnist:" + dir.path().string());
  expectIdxSamples(*dataset, 0.2860f, 0.3530f);
}

TEST(DatasetsTest, IdxGzippedContentUnderARawNameIsDecompressed) {
  TempDir dir;
  writeFile(dir / "t10k-images.idx3-ubyte", gzipStored(idxImages(3, 2, 3, kPixels)));
  writeFile(dir / "t10k-labels.idx1-ubyte", idxLabels(kLabels));
  IdxDatasetOptions options;
  options.directory = dir.path();
  options.split = DatasetSplit::Test;
  options.flavor = IdxFlavor::Mnist;
  IdxDataset dataset(options);
  expectIdxSamples(dataset, 0.1307f, 0.3081f);
  EXPECT_EQ(dataset.imagesFile(), dir / "t10k-images.idx3-ubyte");
}

TEST(DatasetsTest, IdxLargeGzippedFileSpansManyBlocks) {
  TempDir dir;
  constexpr std::uint32_t kCount = 300;  // 300 * 784 bytes: several 64 KiB stored blocks and reader chunks
  Bytes pixels(kCount * 28 * 28);
  Bytes labels(kCount);
  for (std::size_t i = 0; i < pixels.size(); ++i) {
    pixels[i] = static_cast<std::uint8_t>(i * 7);
  }
  for (std::size_t i = 0; i < labels.size(); ++i) {
    labels[i] = static_cast<std::uint8_t>(i % 10);
  }
  writeFile(dir / "train-images-idx3-ubyte.gz", gzipStored(idxImages(kCount, 28, 28, pixels)));
  writeFile(dir / "train-labels-idx1-ubyte.gz", gzipStored(idxLabels(labels)));
  auto dataset = openKind("fashion-mnist:" + dir.path().string());
  ASSERT_EQ(dataset->size(), kCount);
  std::vector<float> image(784);
  std::int64_t label = 0;
  dataset->get(kCount - 1, image.data(), &label);
  EXPECT_EQ(label, (kCount - 1) % 10);
  const float last = pixels.back();
  EXPECT_NEAR(image.back(), (last / 255.0f - 0.2860f) / 0.3530f, kTolerance);
}

TEST(DatasetsTest, IdxMissingDirectoryAndFilesAreNamed) {
  EXPECT_THAT(errorOf([] { openKind("mnist:/nonexistent/mnist-dir"); }),
              AllOf(HasSubstr("/nonexistent/mnist-dir"), HasSubstr("does not exist")));
  TempDir dir;
  writeFile(dir / "train-images-idx3-ubyte", idxImages(3, 2, 3, kPixels));
  EXPECT_THAT(errorOf([&] { openKind("mnist:" + dir.path().string()); }),
              AllOf(HasSubstr("missing file"), HasSubstr(dir.path().string()), HasSubstr("labels"),
                    HasSubstr("train-labels-idx1-ubyte.gz"), HasSubstr("train-labels-idx1-ubyte")));
  EXPECT_THAT(errorOf([&] { openKind("mnist:" + dir.path().string(), DatasetSplit::Test); }),
              AllOf(HasSubstr("missing file"), HasSubstr("t10k-images-idx3-ubyte.gz")));
}

TEST(DatasetsTest, IdxBadMagicNumberSaysExpectedAndFound) {
  TempDir dir;
  writeFile(dir / "train-images-idx3-ubyte", idxImages(3, 2, 3, kPixels, IdxDataset::kLabelsMagic));
  writeFile(dir / "train-labels-idx1-ubyte", idxLabels(kLabels));
  EXPECT_THAT(errorOf([&] { openKind("mnist:" + dir.path().string()); }),
              AllOf(HasSubstr("train-images-idx3-ubyte"), HasSubstr("bad magic number"), HasSubstr("expected 2051"),
                    HasSubstr("found 2049")));
  writeFile(dir / "train-images-idx3-ubyte", idxImages(3, 2, 3, kPixels));
  writeFile(dir / "train-labels-idx1-ubyte", idxLabels(kLabels, 0x12345678));
  EXPECT_THAT(errorOf([&] { openKind("mnist:" + dir.path().string()); }),
              AllOf(HasSubstr("train-labels-idx1-ubyte"), HasSubstr("expected 2049"), HasSubstr("0x12345678")));
}

TEST(DatasetsTest, IdxTruncatedFilesSayExpectedAndActualBytes) {
  TempDir dir;
  Bytes images = idxImages(3, 2, 3, kPixels);
  images.resize(images.size() - 5);  // 16 + 18 = 34 bytes expected, 29 found
  writeFile(dir / "train-images-idx3-ubyte", images);
  writeFile(dir / "train-labels-idx1-ubyte", idxLabels(kLabels));
  EXPECT_THAT(errorOf([&] { openKind("mnist:" + dir.path().string()); }),
              AllOf(HasSubstr("train-images-idx3-ubyte"), HasSubstr("truncated"), HasSubstr("need 34 bytes"),
                    HasSubstr("found 29 bytes")));
  writeFile(dir / "train-images-idx3-ubyte", Bytes{0, 0, 8});
  EXPECT_THAT(errorOf([&] { openKind("mnist:" + dir.path().string()); }),
              AllOf(HasSubstr("truncated"), HasSubstr("16-byte header"), HasSubstr("found 3 bytes")));
  writeFile(dir / "train-images-idx3-ubyte", idxImages(3, 2, 3, kPixels));
  Bytes labels = idxLabels(kLabels);
  labels.pop_back();
  writeFile(dir / "train-labels-idx1-ubyte", labels);
  EXPECT_THAT(errorOf([&] { openKind("mnist:" + dir.path().string()); }),
              AllOf(HasSubstr("train-labels-idx1-ubyte"), HasSubstr("truncated"), HasSubstr("need 11 bytes"),
                    HasSubstr("found 10 bytes")));
}

TEST(DatasetsTest, IdxTruncatedGzipStreamIsReported) {
  TempDir dir;
  Bytes gz = gzipStored(idxImages(3, 2, 3, kPixels));
  gz.resize(gz.size() - 20);  // cuts into the data and drops the trailer
  writeFile(dir / "train-images-idx3-ubyte.gz", gz);
  writeFile(dir / "train-labels-idx1-ubyte.gz", gzipStored(idxLabels(kLabels)));
  EXPECT_THAT(errorOf([&] { openKind("mnist:" + dir.path().string()); }),
              AllOf(HasSubstr("train-images-idx3-ubyte.gz"), HasSubstr("truncated")));
}

TEST(DatasetsTest, IdxImageAndLabelCountMismatchNamesBothCounts) {
  TempDir dir;
  writeFile(dir / "train-images-idx3-ubyte", idxImages(3, 2, 3, kPixels));
  writeFile(dir / "train-labels-idx1-ubyte", idxLabels({1, 2}));
  EXPECT_THAT(errorOf([&] { openKind("mnist:" + dir.path().string()); }),
              AllOf(HasSubstr("count mismatch"), HasSubstr("3 images"), HasSubstr("2 labels"),
                    HasSubstr("train-images-idx3-ubyte"), HasSubstr("train-labels-idx1-ubyte")));
}

TEST(DatasetsTest, IdxLabelOutOfRange) {
  TempDir dir;
  writeFile(dir / "train-images-idx3-ubyte", idxImages(3, 2, 3, kPixels));
  writeFile(dir / "train-labels-idx1-ubyte", idxLabels({1, 10, 2}));
  EXPECT_THAT(
      errorOf([&] { openKind("mnist:" + dir.path().string()); }),
      AllOf(HasSubstr("train-labels-idx1-ubyte"), HasSubstr("label 10 of sample 1"), HasSubstr("out of range")));
}

TEST(DatasetsTest, IndexOutOfRangeIsAnError) {
  TempDir dir;
  writeTrainIdx(dir, false);
  auto dataset = openKind("mnist:" + dir.path().string());
  std::vector<float> image(6);
  std::int64_t label = 0;
  EXPECT_THAT(errorOf([&] { dataset->get(3, image.data(), &label); }),
              AllOf(HasSubstr("index 3"), HasSubstr("out of range")));
}

// CIFAR-10 record r of file f: label (f + r) % 10, pixel p = (f * 31 + r * 7 + p) % 256.
Bytes cifarRecords(int file, int records) {
  Bytes bytes;
  for (int r = 0; r < records; ++r) {
    bytes.push_back(static_cast<std::uint8_t>((file + r) % 10));
    for (int p = 0; p < 3072; ++p) {
      bytes.push_back(static_cast<std::uint8_t>((file * 31 + r * 7 + p) % 256));
    }
  }
  return bytes;
}

void writeCifar(const fs::path& dir) {
  fs::create_directories(dir);
  for (int f = 1; f <= 5; ++f) {
    writeFile(dir / ("data_batch_" + std::to_string(f) + ".bin"), cifarRecords(f, 2));
  }
  writeFile(dir / "test_batch.bin", cifarRecords(0, 3));
}

constexpr std::array<float, 3> kCifarMean = {0.4914f, 0.4822f, 0.4465f};
constexpr std::array<float, 3> kCifarStd = {0.2470f, 0.2435f, 0.2616f};

float cifarNormalised(int file, int record, int pixel) {
  const auto c = static_cast<std::size_t>(pixel / 1024);
  const float x = static_cast<float>((file * 31 + record * 7 + pixel) % 256);
  return (x / 255.0f - kCifarMean[c]) / kCifarStd[c];
}

TEST(DatasetsTest, Cifar10ReadsAllBatchesAndNormalisesPerChannel) {
  TempDir dir;
  writeCifar(dir.path());
  auto train = openKind("cifar10:" + dir.path().string());
  ASSERT_EQ(train->size(), 10);
  EXPECT_EQ(train->sampleShape(), (Shape{3, 32, 32}));
  EXPECT_EQ(train->numClasses(), 10);
  std::vector<float> image(3072);
  for (int f = 1; f <= 5; ++f) {
    for (int r = 0; r < 2; ++r) {
      std::int64_t label = -1;
      train->get((f - 1) * 2 + r, image.data(), &label);
      EXPECT_EQ(label, (f + r) % 10);
      for (int p : {0, 1, 1023, 1024, 2047, 2048, 3071}) {
        EXPECT_NEAR(image[static_cast<std::size_t>(p)], cifarNormalised(f, r, p), kTolerance)
            << "file " << f << " record " << r << " pixel " << p;
      }
    }
  }
  auto test = openKind("cifar10:" + dir.path().string(), DatasetSplit::Test);
  ASSERT_EQ(test->size(), 3);
  std::int64_t label = -1;
  test->get(2, image.data(), &label);
  EXPECT_EQ(label, 2);
  EXPECT_NEAR(image[3000], cifarNormalised(0, 2, 3000), kTolerance);
}

TEST(DatasetsTest, Cifar10AcceptsTheArchiveParentDirectory) {
  TempDir dir;
  writeCifar(dir / "cifar-10-batches-bin");
  auto test = openKind("cifar10:" + dir.path().string(), DatasetSplit::Test);
  EXPECT_EQ(test->size(), 3);
}

TEST(DatasetsTest, Cifar10CorruptFilesAreReported) {
  TempDir dir;
  writeCifar(dir.path());
  Bytes cut = cifarRecords(3, 2);
  cut.resize(cut.size() - 100);
  writeFile(dir / "data_batch_3.bin", cut);
  EXPECT_THAT(errorOf([&] { openKind("cifar10:" + dir.path().string()); }),
              AllOf(HasSubstr("data_batch_3.bin"), HasSubstr("truncated"), HasSubstr("6046 bytes"),
                    HasSubstr("3073-byte records"), HasSubstr("expected 6146 bytes")));
  Bytes badLabel = cifarRecords(0, 3);
  badLabel[3073] = 10;
  writeFile(dir / "test_batch.bin", badLabel);
  EXPECT_THAT(errorOf([&] { openKind("cifar10:" + dir.path().string(), DatasetSplit::Test); }),
              AllOf(HasSubstr("test_batch.bin"), HasSubstr("label 10 of record 1"), HasSubstr("out of range")));
  writeFile(dir / "test_batch.bin", {});
  EXPECT_THAT(errorOf([&] { openKind("cifar10:" + dir.path().string(), DatasetSplit::Test); }),
              AllOf(HasSubstr("test_batch.bin"), HasSubstr("empty")));
}

TEST(DatasetsTest, Cifar10MissingFilesAreListed) {
  TempDir dir;
  writeCifar(dir.path());
  fs::remove(dir / "data_batch_2.bin");
  fs::remove(dir / "data_batch_5.bin");
  EXPECT_THAT(errorOf([&] { openKind("cifar10:" + dir.path().string()); }),
              AllOf(HasSubstr("missing file(s) data_batch_2.bin, data_batch_5.bin"), HasSubstr(dir.path().string()),
                    HasSubstr("expected data_batch_1.bin, data_batch_2.bin")));
  EXPECT_THAT(errorOf([] { openKind("cifar10:/nonexistent/cifar"); }),
              AllOf(HasSubstr("/nonexistent/cifar"), HasSubstr("does not exist")));
}

// Whether `out` is the crop-with-padding-4 (then optional flip) of `original`, both normalised.
bool isCropOf(const std::vector<float>& out, const std::vector<float>& original) {
  for (int dy = 0; dy <= 8; ++dy) {
    for (int dx = 0; dx <= 8; ++dx) {
      for (bool flip : {false, true}) {
        bool same = true;
        for (int c = 0; c < 3 && same; ++c) {
          const float padValue = -kCifarMean[static_cast<std::size_t>(c)] / kCifarStd[static_cast<std::size_t>(c)];
          for (int y = 0; y < 32 && same; ++y) {
            for (int x = 0; x < 32 && same; ++x) {
              const int sy = y + dy - 4;
              const int sx = (flip ? 31 - x : x) + dx - 4;
              const bool inside = sy >= 0 && sy < 32 && sx >= 0 && sx < 32;
              const float expected = inside ? original[static_cast<std::size_t>(c * 1024 + sy * 32 + sx)] : padValue;
              same = std::abs(out[static_cast<std::size_t>(c * 1024 + y * 32 + x)] - expected) < kTolerance;
            }
          }
        }
        if (same) {
          return true;
        }
      }
    }
  }
  return false;
}

TEST(DatasetsTest, Cifar10AugmentationIsSeededCropAndFlipPerEpoch) {
  TempDir dir;
  writeCifar(dir.path());
  Cifar10DatasetOptions plainOptions;
  plainOptions.directory = dir.path();
  Cifar10Dataset plain(plainOptions);
  Cifar10DatasetOptions options = plainOptions;
  options.augment = true;
  options.seed = 5;
  Cifar10Dataset augmented(options);
  Cifar10Dataset sameSeed(options);

  std::vector<float> original(3072);
  std::vector<float> out(3072);
  std::vector<float> again(3072);
  std::int64_t label = 0;
  std::int64_t augmentedLabel = 0;
  int changedAcrossEpochs = 0;
  int differsFromOriginal = 0;
  for (std::int64_t i = 0; i < plain.size(); ++i) {
    plain.get(i, original.data(), &label);
    augmented.setEpoch(0);
    augmented.get(i, out.data(), &augmentedLabel);
    EXPECT_EQ(augmentedLabel, label);
    EXPECT_TRUE(isCropOf(out, original)) << "sample " << i;
    differsFromOriginal += out != original ? 1 : 0;
    sameSeed.setEpoch(0);
    sameSeed.get(i, again.data(), &label);
    EXPECT_EQ(out, again) << "same seed and epoch must give the same augmentation";
    augmented.setEpoch(1);
    augmented.get(i, again.data(), &label);
    EXPECT_TRUE(isCropOf(again, original)) << "sample " << i;
    changedAcrossEpochs += out != again ? 1 : 0;
  }
  EXPECT_GE(differsFromOriginal, 8);  // the identity crop without flip has probability 1/162 per sample
  EXPECT_GE(changedAcrossEpochs, 8);
}

TEST(DatasetsTest, AugmentationIsRejectedWhereItIsNotImplemented) {
  DatasetSpec spec;
  spec.kind = "synthetic";
  spec.augment = true;
  EXPECT_THAT(errorOf([&] { openDataset(spec); }), HasSubstr("augmentation"));
}

// `--data synthetic:segmentation`: a class per pixel, every one in range, all classes drawn, the same sample for the
// same index; images of another rank are refused with the reason.
TEST(DatasetsTest, SyntheticSegmentationDrawsAClassPerPixel) {
  DatasetSpec spec;
  spec.kind = "synthetic:segmentation";
  spec.sampleShape = {3, 6, 5};
  spec.numClasses = 4;
  spec.numSamples = 8;
  EXPECT_EQ(taskOfDataset(spec.kind), Task::Segmentation);
  const std::unique_ptr<Dataset> dataset = openDataset(spec);
  EXPECT_EQ(dataset->task(), Task::Segmentation);
  EXPECT_EQ(dataset->targetShape(), (Shape{6, 5}));
  std::vector<float> image(3 * 6 * 5);
  std::vector<std::int64_t> labels(6 * 5 + 1, -1);  // one past the end: must stay untouched
  std::vector<std::int64_t> again(6 * 5, -1);
  std::set<std::int64_t> seen;
  for (std::int64_t i = 0; i < dataset->size(); ++i) {
    dataset->get(i, image.data(), labels.data());
    for (std::int64_t p = 0; p < 6 * 5; ++p) {
      ASSERT_GE(labels[p], 0) << "sample " << i << " pixel " << p;
      ASSERT_LT(labels[p], 4) << "sample " << i << " pixel " << p;
      seen.insert(labels[p]);
    }
    EXPECT_EQ(labels.back(), -1);
    dataset->get(i, image.data(), again.data());
    EXPECT_TRUE(std::equal(again.begin(), again.end(), labels.begin())) << "sample " << i;
  }
  EXPECT_EQ(seen.size(), 4U);
  spec.sampleShape = {16};
  EXPECT_THAT(errorOf([&] { openDataset(spec); }), HasSubstr("samples must be images {C, H, W}, got [16]"));
}

// Note [Synthetic pixels]: the pixels are the standard normal rounded to 2^16 values. Checked against the normal's
// textbook figures over 1.2M pixels: moments, the mass within 1 and 1.96 sigma, the tails beyond 3 sigma, and odd
// sample sizes (the last draw of a sample fills fewer than four pixels).
TEST(DatasetsTest, SyntheticPixelsFollowTheStandardNormal) {
  SyntheticDataset dataset(SyntheticDatasetOptions{.sampleShape = {3, 37, 37}, .numClasses = 10, .numSamples = 300});
  std::vector<float> image(3 * 37 * 37);
  double sum = 0.0;
  double squares = 0.0;
  double fourth = 0.0;
  std::int64_t within1 = 0;
  std::int64_t within196 = 0;
  std::int64_t beyond3 = 0;
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < dataset.size(); ++i) {
    std::fill(image.begin(), image.end(), std::nanf(""));  // every pixel must be written
    std::int64_t label = -1;
    dataset.get(i, image.data(), &label);
    for (float v : image) {
      ASSERT_TRUE(std::isfinite(v)) << "sample " << i;
      sum += v;
      squares += static_cast<double>(v) * v;
      fourth += static_cast<double>(v) * v * v * v;
      within1 += std::abs(v) < 1.0f;
      within196 += std::abs(v) < 1.959964f;
      beyond3 += std::abs(v) > 3.0f;
      ++count;
    }
  }
  const double n = static_cast<double>(count);
  // Standard errors over 1.23M pixels: mean 0.0009, variance 0.0013, fractions below 0.0005.
  EXPECT_NEAR(sum / n, 0.0, 0.005);
  EXPECT_NEAR(squares / n, 1.0, 0.007);
  EXPECT_NEAR(fourth / n, 3.0, 0.05);  // the normal's kurtosis
  EXPECT_NEAR(static_cast<double>(within1) / n, 0.682689, 0.003);
  EXPECT_NEAR(static_cast<double>(within196) / n, 0.95, 0.002);
  EXPECT_NEAR(static_cast<double>(beyond3) / n, 0.0026998, 0.0005);
}

TEST(DatasetsTest, SyntheticIsDeterministicAndShapedLikeTheModel) {
  DatasetSpec spec;
  spec.kind = "synthetic";
  spec.sampleShape = {3, 8, 8};
  spec.numClasses = 7;
  spec.numSamples = 50;
  spec.seed = 11;
  auto a = openDataset(spec);
  auto b = openDataset(spec);
  spec.seed = 12;
  auto other = openDataset(spec);
  spec.seed = 11;
  spec.split = DatasetSplit::Test;
  auto test = openDataset(spec);
  ASSERT_EQ(a->size(), 50);
  EXPECT_EQ(a->sampleShape(), (Shape{3, 8, 8}));
  EXPECT_EQ(a->numClasses(), 7);
  std::vector<float> x(192);
  std::vector<float> y(192);
  std::vector<float> z(192);
  std::vector<float> t(192);
  std::vector<int> seen(7, 0);
  double sum = 0.0;
  for (std::int64_t i = 49; i >= 0; --i) {  // reverse order: values depend on the index only
    std::int64_t la = -1;
    std::int64_t lb = -1;
    std::int64_t unused = -1;
    a->get(i, x.data(), &la);
    b->get(i, y.data(), &lb);
    other->get(i, z.data(), &unused);
    test->get(i, t.data(), &unused);
    EXPECT_EQ(x, y);
    EXPECT_EQ(la, lb);
    EXPECT_NE(x, z);
    EXPECT_NE(x, t);
    ASSERT_GE(la, 0);
    ASSERT_LT(la, 7);
    seen[static_cast<std::size_t>(la)]++;
    for (float v : x) {
      ASSERT_TRUE(std::isfinite(v));
      sum += v;
    }
  }
  EXPECT_NEAR(sum / (50.0 * 192.0), 0.0, 0.05);  // standard normal pixels
  EXPECT_GE(std::count_if(seen.begin(), seen.end(), [](int n) { return n > 0; }), 5);
}

// A 1-channel 2x2 dataset with pixels 0, 1, 2, 3 (and a second sample 10, 11, 12, 13).
class TinyDataset : public Dataset {
 public:
  std::int64_t size() const override { return 2; }
  Shape sampleShape() const override { return {1, 2, 2}; }
  std::int64_t numClasses() const override { return 10; }
  void get(std::int64_t index, void* input, std::int64_t* label) const override {
    checkIndex(index);
    auto* image = static_cast<float*>(input);
    for (int i = 0; i < 4; ++i) {
      image[i] = static_cast<float>(index * 10 + i);
    }
    *label = index + 3;
  }
  std::string description() const override { return "tiny"; }
};

TEST(DatasetsTest, TransformedDatasetResizesBilinearlyLikeTorch) {
  TransformedDataset resized(std::make_shared<TinyDataset>(), {Shape{3, 4, 4}});
  EXPECT_EQ(resized.sampleShape(), (Shape{3, 4, 4}));
  EXPECT_EQ(resized.size(), 2);
  EXPECT_EQ(resized.numClasses(), 10);
  // torch.nn.functional.interpolate(torch.arange(4.).view(1, 1, 2, 2), size=4, mode="bilinear")
  const std::vector<float> expected = {0.0f, 0.25f, 0.75f, 1.0f, 0.5f, 0.75f, 1.25f, 1.5f,
                                       1.5f, 1.75f, 2.25f, 2.5f, 2.0f, 2.25f, 2.75f, 3.0f};
  std::vector<float> image(48);
  std::int64_t label = 0;
  resized.get(0, image.data(), &label);
  EXPECT_EQ(label, 3);
  for (std::size_t c = 0; c < 3; ++c) {
    for (std::size_t i = 0; i < 16; ++i) {
      EXPECT_NEAR(image[c * 16 + i], expected[i], kTolerance) << "channel " << c << " element " << i;
    }
  }
  resized.get(1, image.data(), &label);
  EXPECT_EQ(label, 4);
  EXPECT_NEAR(image[47], 13.0f, kTolerance);
}

TEST(DatasetsTest, TransformedDatasetDownscalesAndKeepsSameSize) {
  SyntheticDatasetOptions options;
  options.sampleShape = {2, 6, 6};
  auto inner = std::make_shared<SyntheticDataset>(options);
  TransformedDataset same(inner, {Shape{2, 6, 6}});
  TransformedDataset half(inner, {Shape{2, 3, 3}});
  std::vector<float> source(72);
  std::vector<float> image(72);
  std::vector<float> small(18);
  std::int64_t label = 0;
  inner->get(4, source.data(), &label);
  same.get(4, image.data(), &label);
  EXPECT_EQ(image, source);
  half.get(4, small.data(), &label);
  // Halving with half-pixel centres averages each 2x2 block.
  for (int c = 0; c < 2; ++c) {
    for (int y = 0; y < 3; ++y) {
      for (int x = 0; x < 3; ++x) {
        auto at = [&](int yy, int xx) { return source[static_cast<std::size_t>(c * 36 + yy * 6 + xx)]; };
        const float mean =
            (at(2 * y, 2 * x) + at(2 * y, 2 * x + 1) + at(2 * y + 1, 2 * x) + at(2 * y + 1, 2 * x + 1)) / 4;
        EXPECT_NEAR(small[static_cast<std::size_t>(c * 9 + y * 3 + x)], mean, kTolerance);
      }
    }
  }
  EXPECT_THAT(errorOf([&] {
                TransformedDataset wrong(inner, TransformedDatasetOptions{Shape{3, 6, 6}});
              }),
              AllOf(HasSubstr("[2, 6, 6]"), HasSubstr("[3, 6, 6]"), HasSubstr("channels")));
}

TEST(DatasetsTest, OpenDatasetWrapsForAResizeTarget) {
  DatasetSpec spec;
  spec.kind = "synthetic";
  spec.sampleShape = {1, 28, 28};
  spec.resizeTo = {3, 32, 32};
  auto dataset = openDataset(spec);
  EXPECT_EQ(dataset->sampleShape(), (Shape{3, 32, 32}));
  EXPECT_NE(dynamic_cast<TransformedDataset*>(dataset.get()), nullptr);
  EXPECT_NO_THROW(checkDatasetFitsModel(*dataset, {-1, 3, 32, 32}, 10));
}

TEST(DatasetsTest, OpenDatasetRejectsUnknownKinds) {
  EXPECT_THAT(errorOf([] { openKind("imagenet:/data"); }),
              AllOf(HasSubstr("unknown dataset 'imagenet:/data'"), HasSubstr("cifar10:DIR")));
  EXPECT_THAT(errorOf([] { openKind("mnist"); }), HasSubstr("mnist:DIR"));
  EXPECT_THAT(errorOf([] { openKind("cifar10"); }), HasSubstr("cifar10:DIR"));
  EXPECT_EQ(parseDatasetSplit("test"), DatasetSplit::Test);
  EXPECT_THAT(errorOf([] { parseDatasetSplit("valid"); }), HasSubstr("'valid'"));
}

TEST(DatasetsTest, CheckDatasetFitsModel) {
  SyntheticDataset dataset(SyntheticDatasetOptions{});  // {1, 28, 28}, 10 classes
  EXPECT_NO_THROW(checkDatasetFitsModel(dataset, {-1, 1, 28, 28}, 10));
  EXPECT_NO_THROW(checkDatasetFitsModel(dataset, {64, 1, 28, 28}, 10));
  EXPECT_NO_THROW(checkDatasetFitsModel(dataset, {1, 28, 28}, 10));
  EXPECT_NO_THROW(checkDatasetFitsModel(dataset, {-1, 1, 28, 28}, 1000));
  EXPECT_NO_THROW(checkDatasetFitsModel(dataset, {-1, 1, 28, 28}, 0));
  EXPECT_THAT(
      errorOf([&] {
        checkDatasetFitsModel(dataset, {-1, 3, 224, 224}, 1000);
      }),
      AllOf(HasSubstr("does not fit"), HasSubstr("[1, 28, 28]"), HasSubstr("[?, 3, 224, 224]"), HasSubstr("resize")));
  EXPECT_THAT(errorOf([&] {
                checkDatasetFitsModel(dataset, {-1, 784}, 10);
              }),
              AllOf(HasSubstr("[1, 28, 28]"), HasSubstr("[?, 784]")));
  EXPECT_THAT(errorOf([&] {
                checkDatasetFitsModel(dataset, {-1, 1, 28, 28}, 5);
              }),
              AllOf(HasSubstr("10 classes"), HasSubstr("outputs only 5"), HasSubstr("[1, 28, 28]"),
                    HasSubstr("[?, 1, 28, 28]")));
}

TEST(DatasetsTest, RealFashionMnistOpens) {
  if (!fs::is_directory(std::string(kDefaultFashionMnistDir))) {
    GTEST_SKIP() << kDefaultFashionMnistDir << " is absent (Debian package dataset-fashion-mnist)";
  }
  auto train = openKind("fashion-mnist");
  auto test = openKind("fashion-mnist", DatasetSplit::Test);
  EXPECT_EQ(train->size(), 60000);
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(train->sampleShape(), (Shape{1, 28, 28}));
  std::vector<float> image(784);
  std::int64_t label = -1;
  test->get(0, image.data(), &label);
  EXPECT_EQ(label, 9);  // the first test image is an ankle boot
  double sum = 0.0;
  double squares = 0.0;
  constexpr int kSamples = 2000;
  for (int i = 0; i < kSamples; ++i) {
    train->get(i * 30, image.data(), &label);
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    for (float v : image) {
      sum += v;
      squares += static_cast<double>(v) * v;
    }
  }
  // Normalised with the data set's own statistics: roughly zero mean, unit variance.
  const double mean = sum / (kSamples * 784.0);
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_NEAR(std::sqrt(squares / (kSamples * 784.0) - mean * mean), 1.0, 0.05);
}

}  // namespace
}  // namespace strata
