#include "image_resample.h"

#include <algorithm>
#include <cmath>

namespace strata {
namespace {

struct Fit {
  double scale = 1;    // output pixels per source pixel
  double offsetY = 0;  // the crop's top-left corner in the scaled image
  double offsetX = 0;
};

Fit fitOf(std::int64_t inH, std::int64_t inW, std::int64_t outH, std::int64_t outW) {
  Fit fit;
  fit.scale = std::max(static_cast<double>(outH) / static_cast<double>(inH),
                       static_cast<double>(outW) / static_cast<double>(inW));
  fit.offsetY = (static_cast<double>(inH) * fit.scale - static_cast<double>(outH)) / 2;
  fit.offsetX = (static_cast<double>(inW) * fit.scale - static_cast<double>(outW)) / 2;
  return fit;
}

// One output coordinate's source taps and their normalised weights.
struct Taps {
  std::int64_t first = 0;
  std::vector<float> weights;
};

// Triangle-filter taps along one axis for output positions 0..out-1 (half-pixel centres).
std::vector<Taps> tapsOf(std::int64_t in, std::int64_t out, double scale, double offset) {
  const double support = std::max(1.0, 1.0 / scale);  // in source pixels
  std::vector<Taps> taps(static_cast<std::size_t>(out));
  for (std::int64_t o = 0; o < out; ++o) {
    const double centre = (static_cast<double>(o) + 0.5 + offset) / scale;
    const auto first = std::max<std::int64_t>(0, static_cast<std::int64_t>(std::floor(centre - support)));
    const auto last = std::min<std::int64_t>(in - 1, static_cast<std::int64_t>(std::ceil(centre + support)));
    Taps& t = taps[static_cast<std::size_t>(o)];
    t.first = first;
    double sum = 0;
    for (std::int64_t i = first; i <= last; ++i) {
      const double w = std::max(0.0, 1.0 - std::abs(static_cast<double>(i) + 0.5 - centre) / support);
      t.weights.push_back(static_cast<float>(w));
      sum += w;
    }
    if (sum <= 0) {  // beyond the edge: the nearest pixel
      t.first = std::clamp<std::int64_t>(static_cast<std::int64_t>(centre), 0, in - 1);
      t.weights = {1.0f};
      sum = 1;
    }
    for (float& w : t.weights) {
      w = static_cast<float>(w / sum);
    }
  }
  return taps;
}

}  // namespace

std::vector<float> fitImage(const DecodedImage& image, std::int64_t outH, std::int64_t outW) {
  const Fit fit = fitOf(image.height, image.width, outH, outW);
  const std::vector<Taps> rows = tapsOf(image.height, outH, fit.scale, fit.offsetY);
  const std::vector<Taps> cols = tapsOf(image.width, outW, fit.scale, fit.offsetX);
  const std::int64_t c = image.channels;
  // Horizontal pass over every source row, then vertical: [inH, outW, C] in between.
  std::vector<float> across(static_cast<std::size_t>(image.height * outW * c));
  for (std::int64_t y = 0; y < image.height; ++y) {
    const std::uint8_t* src = image.pixels.data() + y * image.width * c;
    for (std::int64_t x = 0; x < outW; ++x) {
      const Taps& t = cols[static_cast<std::size_t>(x)];
      for (std::int64_t ch = 0; ch < c; ++ch) {
        float sum = 0;
        for (std::size_t k = 0; k < t.weights.size(); ++k) {
          sum += t.weights[k] * static_cast<float>(src[(t.first + static_cast<std::int64_t>(k)) * c + ch]);
        }
        across[static_cast<std::size_t>((y * outW + x) * c + ch)] = sum;
      }
    }
  }
  std::vector<float> out(static_cast<std::size_t>(c * outH * outW));
  for (std::int64_t y = 0; y < outH; ++y) {
    const Taps& t = rows[static_cast<std::size_t>(y)];
    for (std::int64_t x = 0; x < outW; ++x) {
      for (std::int64_t ch = 0; ch < c; ++ch) {
        float sum = 0;
        for (std::size_t k = 0; k < t.weights.size(); ++k) {
          sum += t.weights[k] *
                 across[static_cast<std::size_t>(((t.first + static_cast<std::int64_t>(k)) * outW + x) * c + ch)];
        }
        out[static_cast<std::size_t>((ch * outH + y) * outW + x)] = std::clamp(sum, 0.0f, 255.0f) / 255.0f;
      }
    }
  }
  return out;
}

std::vector<std::uint8_t> fitMask(const DecodedImage& mask, std::int64_t outH, std::int64_t outW) {
  const Fit fit = fitOf(mask.height, mask.width, outH, outW);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(outH * outW));
  for (std::int64_t y = 0; y < outH; ++y) {
    const auto sy = std::clamp<std::int64_t>(
        static_cast<std::int64_t>(std::floor((static_cast<double>(y) + 0.5 + fit.offsetY) / fit.scale)), 0,
        mask.height - 1);
    for (std::int64_t x = 0; x < outW; ++x) {
      const auto sx = std::clamp<std::int64_t>(
          static_cast<std::int64_t>(std::floor((static_cast<double>(x) + 0.5 + fit.offsetX) / fit.scale)), 0,
          mask.width - 1);
      out[static_cast<std::size_t>(y * outW + x)] = mask.pixels[static_cast<std::size_t>(sy * mask.width + sx)];
    }
  }
  return out;
}

}  // namespace strata
