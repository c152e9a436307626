#pragma once

// Fitting decoded photos and masks to a model's input, internal to loaders.
#include <cstdint>
#include <vector>

#include "image_codec.h"

namespace strata {

// Note [Fitting images]: an image is scaled so that it covers the model's H x W (its shorter side, relative to the
// target's, fits exactly) and the centre H x W is taken, as torchvision's Resize + CenterCrop do, so photos of any
// size and aspect keep their proportions. Images are resampled with a triangle filter whose support widens by the
// shrink factor (antialiased like PIL's bilinear: a 4000-pixel photo averages every pixel into a 224-pixel one
// rather than sampling a few); masks take the nearest source pixel, so classes are never blended.

// [channels, outH, outW] values in [0, 1].
std::vector<float> fitImage(const DecodedImage& image, std::int64_t outH, std::int64_t outW);

// [outH, outW] class indices.
std::vector<std::uint8_t> fitMask(const DecodedImage& mask, std::int64_t outH, std::int64_t outW);

}  // namespace strata
