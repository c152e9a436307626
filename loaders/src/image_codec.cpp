#include "image_codec.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cctype>
#include <csetjmp>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "strata/error.h"

namespace strata {
namespace fs = std::filesystem;
namespace {

std::vector<std::uint8_t> readBytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    fail("image {}: cannot open: {}", file.string(), std::strerror(errno));
  }
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  STRATA_CHECK(!in.bad(), "image {}: cannot read", file.string());
  return bytes;
}

std::string lowerExtension(const fs::path& file) {
  std::string ext = file.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

bool isPng(const std::vector<std::uint8_t>& bytes) {
  static const std::uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return bytes.size() >= 8 && std::memcmp(bytes.data(), kSignature, 8) == 0;
}

bool isJpeg(const std::vector<std::uint8_t>& bytes) {
  return bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff;
}

DecodedImage decodeJpeg(const fs::path& file, const std::vector<std::uint8_t>& bytes, int channels) {
  const std::unique_ptr<void, int (*)(tjhandle)> handle(tjInitDecompress(), tjDestroy);
  STRATA_CHECK(handle != nullptr, "image {}: cannot start a JPEG decoder", file.string());
  int width = 0;
  int height = 0;
  int subsampling = 0;
  int colorspace = 0;
  if (tjDecompressHeader3(handle.get(), bytes.data(), static_cast<unsigned long>(bytes.size()), &width, &height,
                          &subsampling, &colorspace) != 0) {
    fail("image {}: not a readable JPEG: {}", file.string(), tjGetErrorStr2(handle.get()));
  }
  DecodedImage image{width, height, channels,
                     std::vector<std::uint8_t>(static_cast<std::size_t>(width) * height * channels)};
  if (tjDecompress2(handle.get(), bytes.data(), static_cast<unsigned long>(bytes.size()), image.pixels.data(), width, 0,
                    height, channels == 3 ? TJPF_RGB : TJPF_GRAY, TJFLAG_ACCURATEDCT) != 0 &&
      tjGetErrorCode(handle.get()) == TJERR_FATAL) {
    fail("image {}: the JPEG data is damaged: {}", file.string(), tjGetErrorStr2(handle.get()));
  }
  return image;
}

// libpng reports errors by longjmp; the message is kept here to name in the Error.
struct PngErrors {
  std::jmp_buf jump;
  std::string message;
};

void onPngError(png_structp png, png_const_charp message) {
  auto* errors = static_cast<PngErrors*>(png_get_error_ptr(png));
  errors->message = message;
  std::longjmp(errors->jump, 1);
}

void onPngWarning(png_structp, png_const_charp) {}

struct PngSource {
  const std::vector<std::uint8_t>* bytes;
  std::size_t offset = 0;
};

void readPngBytes(png_structp png, png_bytep out, png_size_t count) {
  auto* source = static_cast<PngSource*>(png_get_io_ptr(png));
  if (source->offset + count > source->bytes->size()) {
    png_error(png, "the file ends early (truncated)");
  }
  std::memcpy(out, source->bytes->data() + source->offset, count);
  source->offset += count;
}

// channels 1 or 3: converted to gray or RGB; channels 0: a mask's indices as they are (gray or palette, 8 bits).
DecodedImage decodePng(const fs::path& file, const std::vector<std::uint8_t>& bytes, int channels) {
  PngErrors errors;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &errors, onPngError, onPngWarning);
  STRATA_CHECK(png != nullptr, "image {}: cannot start a PNG decoder", file.string());
  png_infop info = png_create_info_struct(png);
  PngSource source{&bytes};
  DecodedImage image;
  std::vector<png_bytep> rows;
  std::string problem;
  if (setjmp(errors.jump) != 0) {
    problem = errors.message;
  } else {
    png_set_read_fn(png, &source, readPngBytes);
    png_read_info(png, info);
    const png_uint_32 width = png_get_image_width(png, info);
    const png_uint_32 height = png_get_image_height(png, info);
    const int colour = png_get_color_type(png, info);
    const int depth = png_get_bit_depth(png, info);
    if (channels == 0) {
      if ((colour != PNG_COLOR_TYPE_GRAY && colour != PNG_COLOR_TYPE_PALETTE) || depth > 8) {
        problem = "a mask must be a grayscale or palette PNG of 8-bit class indices, not colours";
      } else if (depth < 8) {
        png_set_packing(png);  // 1, 2 or 4-bit indices to a byte each
      }
    } else {
      png_set_strip_16(png);
      png_set_strip_alpha(png);
      png_set_packing(png);
      if (colour == PNG_COLOR_TYPE_PALETTE) {
        png_set_palette_to_rgb(png);
      }
      if (colour == PNG_COLOR_TYPE_GRAY && depth < 8) {
        png_set_expand_gray_1_2_4_to_8(png);
      }
      const bool gray = colour == PNG_COLOR_TYPE_GRAY || colour == PNG_COLOR_TYPE_GRAY_ALPHA;
      if (channels == 3 && gray) {
        png_set_gray_to_rgb(png);
      } else if (channels == 1 && !gray) {
        png_set_rgb_to_gray_fixed(png, 1, 29900, 58700);  // ITU-R BT.601 luma, as PIL's convert("L") and JPEG's Y
      }
    }
    if (problem.empty()) {
      png_read_update_info(png, info);
      const int stored = png_get_channels(png, info);
      image = DecodedImage{width, height, channels == 0 ? 1 : channels,
                           std::vector<std::uint8_t>(static_cast<std::size_t>(width) * height * stored)};
      rows.resize(height);
      for (png_uint_32 y = 0; y < height; ++y) {
        rows[y] = image.pixels.data() + static_cast<std::size_t>(y) * width * stored;
      }
      png_read_image(png, rows.data());
      if (stored != image.channels) {
        problem = "unexpected channel layout after conversion";
      }
    }
  }
  png_destroy_read_struct(&png, &info, nullptr);
  if (!problem.empty()) {
    fail("image {}: {}", file.string(), problem);
  }
  return image;
}

}  // namespace

bool isImageFile(const fs::path& file) {
  const std::string ext = lowerExtension(file);
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

DecodedImage decodeImage(const fs::path& file, int channels) {
  STRATA_CHECK(channels == 1 || channels == 3, "image {}: {} channels asked for; 1 or 3 are read", file.string(),
               channels);
  const std::vector<std::uint8_t> bytes = readBytes(file);
  if (isJpeg(bytes)) {
    return decodeJpeg(file, bytes, channels);
  }
  if (isPng(bytes)) {
    return decodePng(file, bytes, channels);
  }
  fail("image {}: neither JPEG nor PNG data ({} bytes)", file.string(), bytes.size());
}

DecodedImage decodeMask(const fs::path& file) {
  const std::vector<std::uint8_t> bytes = readBytes(file);
  STRATA_CHECK(isPng(bytes), "mask {}: not PNG data: a mask is a grayscale or palette PNG of class indices",
               file.string());
  return decodePng(file, bytes, 0);
}

}  // namespace strata
