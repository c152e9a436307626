#include "strata/loaders/transformed_dataset.h"

#include <algorithm>

#include <fmt/format.h>

#include "strata/error.h"

namespace strata {

TransformedDataset::TransformedDataset(std::shared_ptr<Dataset> inner, const TransformedDatasetOptions& options)
    : inner_(std::move(inner)), options_(options) {
  STRATA_CHECK(inner_ != nullptr, "TransformedDataset needs a dataset to wrap");
  innerShape_ = inner_->sampleShape();
  const Shape& target = options_.targetShape;
  STRATA_CHECK(innerShape_.size() == 3, "cannot resize {}: its sample shape {} is not {{C, H, W}}",
               inner_->description(), shapeToString(innerShape_));
  STRATA_CHECK(target.size() == 3 && target[0] > 0 && target[1] > 0 && target[2] > 0,
               "cannot resize {} to sample shape {}: the target must be {{C, H, W}} with positive dimensions",
               inner_->description(), shapeToString(target));
  STRATA_CHECK(target[0] == innerShape_[0] || innerShape_[0] == 1,
               "cannot transform {} from sample shape {} to {}: channels can only be kept or repeated from 1",
               inner_->description(), shapeToString(innerShape_), shapeToString(target));
  rowTaps_ = makeTaps(innerShape_[1], target[1]);
  colTaps_ = makeTaps(innerShape_[2], target[2]);
}

std::vector<TransformedDataset::Tap> TransformedDataset::makeTaps(std::int64_t inSize, std::int64_t outSize) {
  std::vector<Tap> taps(static_cast<std::size_t>(outSize));
  const double scale = static_cast<double>(inSize) / static_cast<double>(outSize);
  for (std::int64_t o = 0; o < outSize; ++o) {
    // Half-pixel centres, clamped at the border (PyTorch's align_corners=False).
    const double source = std::max(0.0, (static_cast<double>(o) + 0.5) * scale - 0.5);
    const auto low = std::min(static_cast<std::int64_t>(source), inSize - 1);
    Tap& tap = taps[static_cast<std::size_t>(o)];
    tap.low = low;
    tap.high = std::min(low + 1, inSize - 1);
    tap.weight = static_cast<float>(source - static_cast<double>(low));
  }
  return taps;
}

void TransformedDataset::get(std::int64_t index, void* input, std::int64_t* label) const {
  checkIndex(index);
  auto* image = static_cast<float*>(input);
  // Per call, not a member: get() may run on several threads (Note [Concurrent get]).
  std::vector<float> source(static_cast<std::size_t>(numElements(innerShape_)));
  inner_->get(index, source.data(), label);
  const std::int64_t inH = innerShape_[1];
  const std::int64_t inW = innerShape_[2];
  const std::int64_t outC = options_.targetShape[0];
  const std::int64_t outH = options_.targetShape[1];
  const std::int64_t outW = options_.targetShape[2];
  const std::int64_t resizedChannels = innerShape_[0];
  for (std::int64_t c = 0; c < resizedChannels; ++c) {
    const float* plane = source.data() + c * inH * inW;
    float* out = image + c * outH * outW;
    for (std::int64_t y = 0; y < outH; ++y) {
      const Tap& ty = rowTaps_[static_cast<std::size_t>(y)];
      const float* top = plane + ty.low * inW;
      const float* bottom = plane + ty.high * inW;
      for (std::int64_t x = 0; x < outW; ++x) {
        const Tap& tx = colTaps_[static_cast<std::size_t>(x)];
        const float upper = top[tx.low] + tx.weight * (top[tx.high] - top[tx.low]);
        const float lower = bottom[tx.low] + tx.weight * (bottom[tx.high] - bottom[tx.low]);
        out[y * outW + x] = upper + ty.weight * (lower - upper);
      }
    }
  }
  // A single channel repeated: copy the resized plane rather than resizing it again.
  for (std::int64_t c = resizedChannels; c < outC; ++c) {
    std::copy(image, image + outH * outW, image + c * outH * outW);
  }
}

std::string TransformedDataset::description() const {
  return fmt::format("{} resized to {}", inner_->description(), shapeToString(options_.targetShape));
}

}  // namespace strata
