#pragma once

// Decoding users' image files (JPEG through libjpeg-turbo's TurboJPEG API, PNG through libpng), internal to loaders.
#include <cstdint>
#include <filesystem>
#include <vector>

namespace strata {

// 8-bit pixels, rows top to bottom, channels interleaved (1: gray, 3: RGB).
struct DecodedImage {
  std::int64_t width = 0;
  std::int64_t height = 0;
  int channels = 0;
  std::vector<std::uint8_t> pixels;
};

// The image as RGB (channels 3) or gray (channels 1), whatever the file holds (PNG's alpha is dropped, 16-bit
// samples are narrowed). Throws Error naming the file and what is wrong when it cannot be read or decoded.
DecodedImage decodeImage(const std::filesystem::path& file, int channels);

// A segmentation mask: one 8-bit class index per pixel, from a grayscale or palette PNG (the palette's indices, not
// its colours, as PASCAL VOC stores them). Throws Error naming the file for anything else.
DecodedImage decodeMask(const std::filesystem::path& file);

// Whether the file name ends in an image extension this decoder reads (.jpg, .jpeg, .png, any case).
bool isImageFile(const std::filesystem::path& file);

}  // namespace strata
