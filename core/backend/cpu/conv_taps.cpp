#include "conv_taps.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "strata/thread_pool.h"

namespace strata::cpu {
namespace {

// Weights as planes of taps: OIHW is O x I planes of k... taps of one element each; KRSC is O planes of k... taps
// of I elements each (a run).
struct TapLayout {
  std::int64_t planes = 0, planeSize = 0, run = 1;
  std::vector<std::int64_t> offsets;  // of the used taps in a plane, in the cropped box's row-major order
};

TapLayout tapLayout(const Shape& weight, const TapCrop& crop, bool channelsLast) {
  TapLayout layout;
  const Shape kernel(weight.begin() + 2, weight.end());
  layout.run = channelsLast ? weight[1] : 1;
  layout.planes = channelsLast ? weight[0] : weight[0] * weight[1];
  layout.planeSize = numElements(kernel) * layout.run;
  std::vector<std::int64_t> strides = contiguousStrides(kernel);
  for (std::int64_t& stride : strides)
    stride *= layout.run;
  layout.offsets = {0};
  for (std::size_t d = 0; d < crop.count.size(); ++d) {
    std::vector<std::int64_t> next;
    for (std::int64_t base : layout.offsets) {
      for (std::int64_t k = 0; k < crop.count[d]; ++k)
        next.push_back(base + (crop.first[d] + k) * strides[d]);
    }
    layout.offsets = std::move(next);
  }
  return layout;
}

// Copies a run of taps. OIHW weights have runs of one element: std::copy would call memmove for each of the
// million taps of a 512 x 512 x 3 x 3 kernel (2 ms of ResNet-50's step on its layer4 alone).
inline void copyRun(const float* from, std::int64_t run, float* to) {
  if (run == 1)
    *to = *from;
  else
    std::copy(from, from + run, to);
}

// Runs fn(first plane, end plane) over W's planes in parallel; the planes are small (the kernel's taps), so each
// task takes many.
template <typename Fn>
void forPlanes(const TapLayout& layout, Fn&& fn) {
  parallelFor(0, layout.planes, std::max<std::int64_t>(1, 8192 / std::max<std::int64_t>(layout.planeSize, 1)), fn);
}

}  // namespace

TapCrop usedTaps(const WindowGeometry& g, const std::vector<std::int64_t>& inputSpatial) {
  TapCrop crop;
  for (std::size_t d = 0; d < g.kernel.size(); ++d) {
    std::int64_t lo = g.kernel[d], hi = -1;
    for (std::int64_t k = 0; k < g.kernel[d]; ++k) {
      for (std::int64_t o = 0; o < g.output[d]; ++o) {
        const std::int64_t position = o * g.strides[d] - g.padBegin[d] + k * g.dilations[d];
        if (position >= 0 && position < inputSpatial[d]) {
          lo = std::min(lo, k);
          hi = std::max(hi, k);
          break;
        }
      }
    }
    if (hi < lo)
      return TapCrop{};  // no tap meets the input: the output is the bias alone, left to the full kernel
    crop.first.push_back(lo);
    crop.count.push_back(hi - lo + 1);
    crop.pruned = crop.pruned || crop.count.back() < g.kernel[d];
  }
  if (crop.pruned) {
    const WindowGeometry cropped = croppedWindow(g, inputSpatial, crop);
    for (std::size_t d = 0; d < g.kernel.size(); ++d) {
      if (cropped.padBegin[d] < 0 || cropped.padEnd[d] < 0)
        return TapCrop{};
    }
  }
  return crop;
}

WindowGeometry croppedWindow(const WindowGeometry& g, const std::vector<std::int64_t>& inputSpatial,
                             const TapCrop& crop) {
  WindowGeometry out = g;
  for (std::size_t d = 0; d < g.kernel.size(); ++d) {
    out.kernel[d] = crop.count[d];
    out.padBegin[d] = g.padBegin[d] - crop.first[d] * g.dilations[d];
    out.padEnd[d] = dnnlPadEnd(out, inputSpatial, d);
  }
  return out;
}

Shape croppedWeightShape(const Shape& weight, const TapCrop& crop) {
  Shape out{weight[0], weight[1]};
  out.insert(out.end(), crop.count.begin(), crop.count.end());
  return out;
}

std::int64_t croppedOffset(const std::vector<std::int64_t>& strides, std::size_t spatialStart, const TapCrop& crop) {
  std::int64_t offset = 0;
  for (std::size_t d = 0; d < crop.first.size(); ++d)
    offset += crop.first[d] * strides[spatialStart + d];
  return offset;
}

void gatherTaps(const float* w, float* cropped, const Shape& weight, const TapCrop& crop, bool channelsLast) {
  const TapLayout layout = tapLayout(weight, crop, channelsLast);
  const auto used = static_cast<std::int64_t>(layout.offsets.size());
  const std::int64_t run = layout.run;
  forPlanes(layout, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p) {
      for (std::int64_t t = 0; t < used; ++t)
        copyRun(w + p * layout.planeSize + layout.offsets[static_cast<std::size_t>(t)], run,
                cropped + (p * used + t) * run);
    }
  });
}

void scatterTaps(const float* cropped, float* w, const Shape& weight, const TapCrop& crop, bool channelsLast) {
  const TapLayout layout = tapLayout(weight, crop, channelsLast);
  const auto used = static_cast<std::int64_t>(layout.offsets.size());
  const std::int64_t run = layout.run;
  forPlanes(layout, [&](std::int64_t begin, std::int64_t end) {
    std::fill(w + begin * layout.planeSize, w + end * layout.planeSize, 0.0f);
    for (std::int64_t p = begin; p < end; ++p) {
      for (std::int64_t t = 0; t < used; ++t)
        copyRun(cropped + (p * used + t) * run, run,
                w + p * layout.planeSize + layout.offsets[static_cast<std::size_t>(t)]);
    }
  });
}

std::string tapNote(const Shape& weight, const TapCrop& crop) {
  if (!crop.pruned)
    return "";
  const Shape kernel(weight.begin() + 2, weight.end());
  return fmt::format("; taps {} of {}", fmt::join(crop.count, "x"), fmt::join(kernel, "x"));
}

}  // namespace strata::cpu
