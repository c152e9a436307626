// Users' photos and segmentation masks (Notes [Image folders], [Segmentation folders], [Fitting images]): files
// written here with libpng and TurboJPEG, read back through the data sets.
#include <png.h>
#include <turbojpeg.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "strata/loaders/data_loader.h"
#include "strata/loaders/dataset.h"
#include "strata/loaders/image_folder_dataset.h"
#include "strata/loaders/segmentation_dataset.h"
#include "test_models.h"

namespace strata {
// A named namespace: the unity build compiles test files together, and their helpers must not meet.
namespace image_datasets_test {

namespace fs = std::filesystem;
using ::testing::AllOf;
using testing::errorOf;
using ::testing::HasSubstr;
using testing::TempDir;

// colour_type: PNG_COLOR_TYPE_GRAY, _RGB or _PALETTE (pixels are then palette indices).
void writePng(const fs::path& file, int width, int height, int colourType, const std::vector<std::uint8_t>& pixels) {
  fs::create_directories(file.parent_path());
  FILE* out = std::fopen(file.c_str(), "wb");
  ASSERT_NE(out, nullptr);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_init_io(png, out);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8, colourType,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (colourType == PNG_COLOR_TYPE_PALETTE) {
    std::vector<png_color> palette(256);
    for (int i = 0; i < 256; ++i) {
      palette[static_cast<std::size_t>(i)] = {static_cast<png_byte>(i * 7), static_cast<png_byte>(255 - i),
                                              static_cast<png_byte>(i * 3)};
    }
    png_set_PLTE(png, info, palette.data(), 256);
  }
  png_write_info(png, info);
  const int channels = colourType == PNG_COLOR_TYPE_RGB ? 3 : 1;
  for (int y = 0; y < height; ++y) {
    png_write_row(png, const_cast<png_bytep>(pixels.data() + static_cast<std::size_t>(y) * width * channels));
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  std::fclose(out);
}

void writeJpeg(const fs::path& file, int width, int height, const std::vector<std::uint8_t>& rgb) {
  fs::create_directories(file.parent_path());
  tjhandle handle = tjInitCompress();
  unsigned char* bytes = nullptr;
  unsigned long size = 0;
  ASSERT_EQ(
      tjCompress2(handle, rgb.data(), width, 0, height, TJPF_RGB, &bytes, &size, TJSAMP_444, 100, TJFLAG_ACCURATEDCT),
      0);
  std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(bytes), static_cast<std::streamsize>(size));
  tjFree(bytes);
  tjDestroy(handle);
}

std::vector<std::uint8_t> solid(int width, int height, std::uint8_t r, std::uint8_t g, std::uint8_t b) {
  std::vector<std::uint8_t> rgb;
  for (int i = 0; i < width * height; ++i) {
    rgb.insert(rgb.end(), {r, g, b});
  }
  return rgb;
}

float normalised(float pixel, int channel) {
  const float mean[3] = {0.485f, 0.456f, 0.406f};
  const float deviation[3] = {0.229f, 0.224f, 0.225f};
  return (pixel / 255.0f - mean[channel]) / deviation[channel];
}

ImageFolderOptions folder(const fs::path& directory, const Shape& shape, DatasetSplit split = DatasetSplit::Train) {
  ImageFolderOptions options;
  options.directory = directory;
  options.split = split;
  options.sampleShape = shape;
  return options;
}

SegmentationOptions pairs(const fs::path& directory, const Shape& shape, std::int64_t classes, bool augment = false,
                          std::uint64_t seed = 0) {
  SegmentationOptions options;
  options.directory = directory;
  options.sampleShape = shape;
  options.classes = classes;
  options.augment = augment;
  options.seed = seed;
  return options;
}

TEST(ImageFolderTest, ClassesByFolderEveryTwentiethImageForTestingPixelsNormalised) {
  TempDir dir;
  for (int i = 0; i < 21; ++i) {
    writePng(dir / "photos" / "cat" / ("c" + std::to_string(100 + i) + ".png"), 6, 4, PNG_COLOR_TYPE_RGB,
             solid(6, 4, 200, 10, 30));
  }
  writeJpeg(dir / "photos" / "dog" / "sub" / "d1.jpg", 8, 8, solid(8, 8, 0, 128, 255));
  std::ofstream(dir / "photos" / "dog" / "notes.txt") << "not an image";
  const ImageFolderDataset train(folder(dir / "photos", {3, 4, 4}));
  const ImageFolderDataset test(folder(dir / "photos", {3, 4, 4}, DatasetSplit::Test));
  EXPECT_EQ(train.numClasses(), 2);
  EXPECT_EQ(train.classNames(), (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(train.size(), 21) << "20 cats and the dog (found in a sub-folder)";
  EXPECT_EQ(test.size(), 1) << "every 20th cat";
  EXPECT_THAT(train.description(), HasSubstr("1 other files left out"));
  std::vector<float> image(3 * 16);
  std::int64_t label = -1;
  train.get(20, image.data(), &label);  // the dog: JPEG, decoded exactly for a flat colour at quality 100
  EXPECT_EQ(label, 1);
  for (int c = 0; c < 3; ++c) {
    const float want = normalised(c == 0 ? 0.0f : c == 1 ? 128.0f : 255.0f, c);
    EXPECT_NEAR(image[static_cast<std::size_t>(c * 16 + 5)], want, 1.5f / 255.0f / 0.224f) << c;
  }
  test.get(0, image.data(), &label);
  EXPECT_EQ(label, 0);
  EXPECT_NEAR(image[0], normalised(200, 0), 1e-5f);
  EXPECT_NEAR(image[16], normalised(10, 1), 1e-5f);
}

// Note [Fitting images]: the shorter side fits, the centre is kept, and shrinking averages (no aliasing).
TEST(ImageFolderTest, PhotosAreFittedCentredAndAntialiased) {
  TempDir dir;
  // 12 x 4: a red left third, a green middle third, a blue right third; fitted to 4 x 4 it shows the green middle.
  std::vector<std::uint8_t> thirds;
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 12; ++x) {
      const int third = x / 4;
      thirds.insert(thirds.end(),
                    {static_cast<std::uint8_t>(third == 0 ? 255 : 0), static_cast<std::uint8_t>(third == 1 ? 255 : 0),
                     static_cast<std::uint8_t>(third == 2 ? 255 : 0)});
    }
  }
  writePng(dir / "a" / "wide" / "thirds.png", 12, 4, PNG_COLOR_TYPE_RGB, thirds);
  // A one-pixel checkerboard, 64 x 64, gray: shrunk to 4 x 4 every pixel is the mean, 127.5.
  std::vector<std::uint8_t> board;
  for (int y = 0; y < 64; ++y) {
    for (int x = 0; x < 64; ++x) {
      board.push_back(static_cast<std::uint8_t>((x + y) % 2 == 0 ? 255 : 0));
    }
  }
  writePng(dir / "a" / "zboard" / "board.png", 64, 64, PNG_COLOR_TYPE_GRAY, board);
  const ImageFolderDataset data(folder(dir / "a", {3, 4, 4}));
  std::vector<float> image(48);
  std::int64_t label = -1;
  data.get(0, image.data(), &label);
  for (int p = 0; p < 16; ++p) {
    EXPECT_NEAR(image[static_cast<std::size_t>(p)], normalised(0, 0), 1e-5f) << "no red in the centre, pixel " << p;
    EXPECT_NEAR(image[static_cast<std::size_t>(16 + p)], normalised(255, 1), 1e-5f) << "all green, pixel " << p;
  }
  data.get(1, image.data(), &label);
  for (int p = 0; p < 16; ++p) {
    EXPECT_NEAR(image[static_cast<std::size_t>(p)], normalised(127.5f, 0), 0.05f) << "averaged, pixel " << p;
  }
  // Gray photos into an RGB model repeat the channel; RGB photos into a one-channel model become gray.
  const ImageFolderDataset gray(folder(dir / "a", {1, 4, 4}));
  std::vector<float> one(16);
  gray.get(0, one.data(), &label);
  EXPECT_NEAR(one[5], (0.587f - 0.449f) / (0.678f / 3.0f), 0.02f) << "green's luma, normalised by the mean stats";
}

TEST(ImageFolderTest, TrainAndValFoldersAndBadFilesNamed) {
  TempDir dir;
  writePng(dir / "set" / "train" / "a" / "1.png", 4, 4, PNG_COLOR_TYPE_GRAY, std::vector<std::uint8_t>(16, 9));
  writePng(dir / "set" / "train" / "b" / "1.png", 4, 4, PNG_COLOR_TYPE_GRAY, std::vector<std::uint8_t>(16, 9));
  writePng(dir / "set" / "val" / "a" / "2.png", 4, 4, PNG_COLOR_TYPE_GRAY, std::vector<std::uint8_t>(16, 9));
  const ImageFolderDataset train(folder(dir / "set", {1, 4, 4}));
  const ImageFolderDataset val(folder(dir / "set", {1, 4, 4}, DatasetSplit::Test));
  EXPECT_EQ(train.size(), 2);
  EXPECT_EQ(val.size(), 1);

  fs::create_directories(dir / "bad" / "a");
  std::ofstream(dir / "bad" / "a" / "broken.jpg") << "\xff\xd8\xff garbage, not a JPEG stream";
  std::ofstream(dir / "bad" / "a" / "text.png") << "plain text";
  {
    // A PNG cut in half.
    writePng(dir / "cut.png", 16, 16, PNG_COLOR_TYPE_GRAY, std::vector<std::uint8_t>(256, 7));
    std::ifstream in(dir / "cut.png", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(dir / "bad" / "a" / "cut.png", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  const ImageFolderDataset bad(folder(dir / "bad", {3, 4, 4}));
  ASSERT_EQ(bad.size(), 3);
  std::vector<float> image(48);
  std::int64_t label = 0;
  EXPECT_THAT(errorOf([&] { bad.get(0, image.data(), &label); }),
              AllOf(HasSubstr("broken.jpg"), HasSubstr("not a readable JPEG")));
  EXPECT_THAT(errorOf([&] { bad.get(1, image.data(), &label); }), AllOf(HasSubstr("cut.png"), HasSubstr("truncated")));
  EXPECT_THAT(errorOf([&] { bad.get(2, image.data(), &label); }),
              AllOf(HasSubstr("text.png"), HasSubstr("neither JPEG nor PNG")));
  EXPECT_THAT(errorOf([&] { ImageFolderDataset{folder(dir / "none", {3, 4, 4})}; }), HasSubstr("no such directory"));
  // The loader passes a decoding error on, naming the file (never a crash or a skipped sample).
  DataLoaderOptions loading;
  loading.batchSize = 3;
  loading.shuffle = false;
  DataLoader loader(std::make_shared<ImageFolderDataset>(folder(dir / "bad", {3, 4, 4})), loading);
  loader.startEpoch(0);
  EXPECT_THAT(errorOf([&] { loader.next(); }), HasSubstr("broken.jpg"));
}

TEST(SegmentationDatasetTest, MasksAreClassIndicesFittedWithTheirImages) {
  TempDir dir;
  // 8 x 4 image; its palette mask: left half class 1, right half class 2, one pixel 255 (ignored).
  for (int i = 0; i < 3; ++i) {
    writeJpeg(dir / "seg" / "images" / ("p" + std::to_string(i) + ".jpg"), 8, 4, solid(8, 4, 50, 60, 70));
    std::vector<std::uint8_t> mask;
    for (int y = 0; y < 4; ++y) {
      for (int x = 0; x < 8; ++x) {
        mask.push_back(static_cast<std::uint8_t>(x == 7 && y == 0 ? 255 : x < 4 ? 1 : 2));
      }
    }
    writePng(dir / "seg" / "masks" / ("p" + std::to_string(i) + ".png"), 8, 4, PNG_COLOR_TYPE_PALETTE, mask);
  }
  const SegmentationDataset data(pairs(dir / "seg", {3, 4, 8}, 3));
  EXPECT_EQ(data.task(), Task::Segmentation);
  EXPECT_EQ(data.targetShape(), (Shape{4, 8}));
  ASSERT_EQ(data.size(), 3);
  std::vector<float> image(3 * 32);
  std::vector<std::int64_t> target(32);
  data.get(1, image.data(), target.data());
  EXPECT_EQ(target[0], 1);
  EXPECT_EQ(target[3], 1);
  EXPECT_EQ(target[4], 2);
  EXPECT_EQ(target[7], kIgnoredPixel);
  // Flips move image and mask together, the same way for a given epoch.
  SegmentationDataset flipping(pairs(dir / "seg", {3, 4, 8}, 3, true, 5));
  std::vector<std::int64_t> first(32);
  std::vector<std::int64_t> again(32);
  int flipped = 0;
  for (std::int64_t epoch = 0; epoch < 6; ++epoch) {
    flipping.setEpoch(epoch);
    flipping.get(0, image.data(), first.data());
    flipping.get(0, image.data(), again.data());
    EXPECT_EQ(first, again);
    flipped += first[0] == kIgnoredPixel ? 1 : 0;  // the ignored pixel moved to the top-left corner
  }
  EXPECT_GT(flipped, 0);
  EXPECT_LT(flipped, 6);
}

TEST(SegmentationDatasetTest, BadMasksAreNamedWithThePixel) {
  TempDir dir;
  writePng(dir / "s" / "images" / "a.png", 4, 4, PNG_COLOR_TYPE_GRAY, std::vector<std::uint8_t>(16, 3));
  writePng(dir / "s" / "masks" / "a.png", 4, 2, PNG_COLOR_TYPE_GRAY, std::vector<std::uint8_t>(8, 0));
  std::vector<std::uint8_t> big(16, 0);
  big[6] = 7;
  writePng(dir / "s" / "images" / "b.png", 4, 4, PNG_COLOR_TYPE_GRAY, std::vector<std::uint8_t>(16, 3));
  writePng(dir / "s" / "masks" / "b.png", 4, 4, PNG_COLOR_TYPE_GRAY, big);
  writePng(dir / "s" / "images" / "c.png", 4, 4, PNG_COLOR_TYPE_GRAY, std::vector<std::uint8_t>(16, 3));
  writePng(dir / "s" / "masks" / "c.png", 4, 4, PNG_COLOR_TYPE_RGB, std::vector<std::uint8_t>(48, 0));
  const SegmentationDataset data(pairs(dir / "s", {1, 4, 4}, 3));
  std::vector<float> image(16);
  std::vector<std::int64_t> target(16);
  EXPECT_THAT(errorOf([&] { data.get(0, image.data(), target.data()); }),
              AllOf(HasSubstr("masks/a.png is 4x2"), HasSubstr("images/a.png is 4x4")));
  EXPECT_THAT(errorOf([&] { data.get(1, image.data(), target.data()); }),
              AllOf(HasSubstr("masks/b.png has class 7 at pixel (2, 1)"), HasSubstr("3 classes")));
  EXPECT_THAT(errorOf([&] { data.get(2, image.data(), target.data()); }),
              AllOf(HasSubstr("masks/c.png"), HasSubstr("grayscale or palette PNG")));
  writePng(dir / "s" / "images" / "d.png", 4, 4, PNG_COLOR_TYPE_GRAY, std::vector<std::uint8_t>(16, 3));
  EXPECT_THAT(errorOf([&] {
                SegmentationDataset{pairs(dir / "s", {1, 4, 4}, 3)};
              }),
              AllOf(HasSubstr("images/d.png has no mask"), HasSubstr("masks/d.png")));
}

}  // namespace image_datasets_test
}  // namespace strata
