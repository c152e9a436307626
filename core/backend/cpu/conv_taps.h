#pragma once

// Note [Pruned taps]: on small feature maps some kernel taps of a padded convolution only ever meet padding: a 3x3
// convolution with pads 1 on a 1x1 map uses its centre tap alone, a 7x7 depthwise one with pads 3 on a 2x2 map its
// middle 3x3. Those taps multiply zeros in the forward pass, receive exactly zero weight gradient, and add nothing
// to the data gradient, so the float32 kernels run the convolution on the used taps only (a smaller kernel, the
// padding shifted by the taps cut at the start) and give the unused ones a zero gradient: exact, and up to 9x (49x)
// less work. CIFAR-sized inputs meet this in every torchvision classifier's last stages (ResNet's layer4 at 1x1,
// DenseNet-121's last block, EfficientNetV2's and ConvNeXt's last stages), where oneDNN's direct convolutions compute
// every tap. Float64 keeps the full kernel: it is the reference these kernels are tested against.

#include <cstdint>
#include <string>
#include <vector>

#include "dnnl_context.h"

namespace strata::cpu {

// The used taps of a convolution window: per spatial dim, the first used tap and how many follow.
struct TapCrop {
  bool pruned = false;  // false: every tap is used (or cutting would need negative padding), nothing changes
  std::vector<std::int64_t> first, count;
};

// The taps of `geometry` that meet at least one input position for some output position, as one box.
TapCrop usedTaps(const WindowGeometry& geometry, const std::vector<std::int64_t>& inputSpatial);

// The window that runs the used taps only: same strides, dilations and output, smaller kernel, shifted padding.
WindowGeometry croppedWindow(const WindowGeometry& geometry, const std::vector<std::int64_t>& inputSpatial,
                             const TapCrop& crop);

// W's shape [O, I, k...] with the kernel dims cut to the used taps.
Shape croppedWeightShape(const Shape& weight, const TapCrop& crop);

// The element offset of the first used tap in weights whose dims have `strides` (spatial dims from `spatialStart`):
// where a strided view of the used taps starts.
std::int64_t croppedOffset(const std::vector<std::int64_t>& strides, std::size_t spatialStart, const TapCrop& crop);

// Copies the used taps of the full weights `w` (logical shape `weight`, [O, I, k...], stored OIHW or, channels-last,
// KRSC) into a dense cropped tensor in the same layout.
void gatherTaps(const float* w, float* cropped, const Shape& weight, const TapCrop& crop, bool channelsLast = false);

// Writes a dense cropped gradient into the full one, with zeros at the unused taps.
void scatterTaps(const float* cropped, float* w, const Shape& weight, const TapCrop& crop, bool channelsLast = false);

// "; taps 1x1 of 3x3" for a kernel's implementation(), empty when nothing is pruned.
std::string tapNote(const Shape& weight, const TapCrop& crop);

}  // namespace strata::cpu
