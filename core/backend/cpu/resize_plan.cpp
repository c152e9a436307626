#include "resize_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "shape_ops_common.h"
#include "strata/error.h"

namespace strata::cpu::resize {

namespace {

using shape_detail::elementAsDouble;
using shape_detail::listToString;
using shape_detail::toInt64Vector;

Mode modeOf(const std::string& mode) {
  if (mode == "nearest")
    return Mode::Nearest;
  if (mode == "linear")
    return Mode::Linear;
  if (mode == "cubic")
    return Mode::Cubic;
  fail("mode '{}' is not one of nearest, linear, cubic", mode);
}

Coordinates coordinatesOf(const std::string& mode) {
  if (mode == "half_pixel")
    return Coordinates::HalfPixel;
  if (mode == "half_pixel_symmetric")
    return Coordinates::HalfPixelSymmetric;
  if (mode == "pytorch_half_pixel")
    return Coordinates::PytorchHalfPixel;
  if (mode == "align_corners")
    return Coordinates::AlignCorners;
  if (mode == "asymmetric")
    return Coordinates::Asymmetric;
  if (mode == "tf_half_pixel_for_nn")
    return Coordinates::TfHalfPixelForNn;
  if (mode == "tf_crop_and_resize")
    return Coordinates::TfCropAndResize;
  fail("coordinate_transformation_mode '{}' is not supported (not an ONNX mode)", mode);
}

NearestRounding roundingOf(const std::string& mode) {
  if (mode == "round_prefer_floor")
    return NearestRounding::RoundPreferFloor;
  if (mode == "round_prefer_ceil")
    return NearestRounding::RoundPreferCeil;
  if (mode == "floor")
    return NearestRounding::Floor;
  if (mode == "ceil")
    return NearestRounding::Ceil;
  fail("nearest_mode '{}' is not one of round_prefer_floor, round_prefer_ceil, floor, ceil", mode);
}

// Where one axis's output lands: its size, the scale the coordinates use, and the crop (tf_crop_and_resize).
struct AxisSize {
  std::int64_t out = 0;
  double scale = 1.0;
  double cropStart = 0.0, cropEnd = 1.0;
  double lengthResized = 0.0;  // the output length the coordinate formulas divide by (Note [Resize coordinates])
};

std::vector<double> doublesOf(const Tensor& t) {
  std::vector<double> values(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i)
    values[static_cast<std::size_t>(i)] = elementAsDouble(t, i);
  return values;
}

bool given(const Tensor* t) {
  return t != nullptr && t->defined() && t->numel() > 0;
}

// Note [Resize coordinates]: the formulas follow ONNX's reference implementation (onnx/backend/test/case/node/
// resize.py, whose outputs the node tests hold), which divides by the output length as a real number, scale *
// input length: with sizes that is the output size, with scales it may have a fraction (0.6 * 4 = 2.4 where the
// output has 2). torchvision's and PyTorch's exports use scales whose products are whole, or sizes.
std::vector<AxisSize> axisSizes(const Options& options, const Shape& in, const Operands& operands) {
  const std::size_t rank = in.size();
  const bool useScales = given(operands.scales);
  const bool useSizes = given(operands.sizes);
  if (useScales && useSizes)
    fail("scales and sizes are both given: one of them must be empty or absent");
  if (!useScales && !useSizes)
    fail("needs scales or sizes (both are absent or empty)");
  std::vector<double> roi;
  if (options.coordinates == Coordinates::TfCropAndResize) {
    if (!given(operands.roi))
      fail("coordinate_transformation_mode 'tf_crop_and_resize' needs roi");
    roi = doublesOf(*operands.roi);
    if (roi.size() != 2 * rank)
      fail("roi has {} values but the input {} needs {} (starts, then ends)", roi.size(), shapeToString(in), 2 * rank);
  }
  std::vector<AxisSize> sizes(rank);
  const std::vector<double> scales = useScales ? doublesOf(*operands.scales) : std::vector<double>{};
  const std::vector<std::int64_t> outs = useSizes ? toInt64Vector(*operands.sizes) : std::vector<std::int64_t>{};
  if (useScales && scales.size() != rank)
    fail("scales has {} values but the input {} has rank {}", scales.size(), shapeToString(in), rank);
  if (useSizes && outs.size() != rank)
    fail("sizes {} has {} values but the input {} has rank {}", listToString(outs), outs.size(), shapeToString(in),
         rank);
  for (std::size_t a = 0; a < rank; ++a) {
    AxisSize& s = sizes[a];
    const auto inSize = static_cast<double>(in[a]);
    if (!roi.empty()) {
      s.cropStart = roi[a];
      s.cropEnd = roi[a + rank];
    }
    const double extent = s.cropEnd - s.cropStart;
    if (useScales) {
      s.scale = scales[a];
      if (!(s.scale > 0.0) || !std::isfinite(s.scale))
        fail("scale {} of axis {} is not a positive number", s.scale, a);
      s.lengthResized = s.scale * inSize * (roi.empty() ? 1.0 : extent);
      const double out = std::floor(s.lengthResized);
      if (out > 1e15)
        fail("scale {} of axis {} makes an output that is too large", s.scale, a);
      s.out = static_cast<std::int64_t>(out);
    } else {
      s.out = outs[a];
      if (s.out < 0)
        fail("sizes {} has a negative size", listToString(outs));
      if (in[a] == 0 && s.out > 0)
        fail("cannot resize axis {} of size 0 to {}", a, s.out);
      s.scale = in[a] == 0 ? 1.0 : static_cast<double>(s.out) / inSize;
      s.lengthResized = roi.empty() ? s.scale * inSize : static_cast<double>(s.out);
    }
  }
  return sizes;
}

// The input coordinate of output position x; false when tf_crop_and_resize puts it outside the input.
bool sourceCoordinate(const Options& options, const AxisSize& s, std::int64_t inSize, std::int64_t x, double& out) {
  const auto xr = static_cast<double>(x);
  const auto in = static_cast<double>(inSize);
  switch (options.coordinates) {
    case Coordinates::HalfPixel:
      out = (xr + 0.5) / s.scale - 0.5;
      return true;
    case Coordinates::HalfPixelSymmetric: {
      // Opset 19: half_pixel, shifted so that the sampled span is centred on the input's.
      const double adjustment = static_cast<double>(s.out) / s.lengthResized;
      const double center = in / 2.0;
      out = center * (1.0 - adjustment) + (xr + 0.5) / s.scale - 0.5;
      return true;
    }
    case Coordinates::PytorchHalfPixel:
      out = s.lengthResized == 1.0 ? -0.5 : (xr + 0.5) / s.scale - 0.5;
      return true;
    case Coordinates::AlignCorners:
      out = s.lengthResized == 1.0 ? 0.0 : xr * (in - 1.0) / (s.lengthResized - 1.0);
      return true;
    case Coordinates::Asymmetric:
      out = xr / s.scale;
      return true;
    case Coordinates::TfHalfPixelForNn:
      out = (xr + 0.5) / s.scale;
      return true;
    case Coordinates::TfCropAndResize: {
      const double extent = s.cropEnd - s.cropStart;
      out = s.lengthResized == 1.0 ? extent * (in - 1.0) / 2.0 : xr * extent * (in - 1.0) / (s.lengthResized - 1.0);
      out += s.cropStart * (in - 1.0);
      return out >= 0.0 && out <= in - 1.0;
    }
  }
  return true;
}

// Keys' cubic convolution weights of the four taps around a point `ratio` past the second one (ONNX's formula).
void cubicWeights(double ratio, double a, double* w) {
  const double r1 = ratio + 1.0, q = 1.0 - ratio, q1 = q + 1.0;
  w[0] = ((a * r1 - 5.0 * a) * r1 + 8.0 * a) * r1 - 4.0 * a;
  w[1] = ((a + 2.0) * ratio - (a + 3.0)) * ratio * ratio + 1.0;
  w[2] = ((a + 2.0) * q - (a + 3.0)) * q * q + 1.0;
  w[3] = ((a * q1 - 5.0 * a) * q1 + 8.0 * a) * q1 - 4.0 * a;
}

int tapsOf(Mode mode) {
  switch (mode) {
    case Mode::Nearest:
      return 1;
    case Mode::Linear:
      return 2;
    case Mode::Cubic:
      return 4;
  }
  return 1;
}

// One axis's taps. As in ONNX's reference: x = base + ratio with ratio in (0, 1] (a whole x is its left
// neighbour plus 1), linear reads base and base + 1, cubic base - 1 to base + 2, nearest one of base and base + 1;
// positions outside the input read the edge (or, with exclude_outside, weigh nothing and the rest is renormalised).
AxisTaps axisTaps(const Options& options, const AxisSize& s, std::int64_t inSize) {
  AxisTaps taps;
  taps.inSize = inSize;
  taps.outSize = s.out;
  taps.taps = tapsOf(options.mode);
  const auto n = static_cast<std::size_t>(s.out);
  taps.index.assign(n * static_cast<std::size_t>(taps.taps), 0);
  taps.weight.assign(n * static_cast<std::size_t>(taps.taps), 0.0);
  if (inSize > std::numeric_limits<std::int32_t>::max() || s.out > std::numeric_limits<std::int32_t>::max())
    fail("an axis of {} elements resized to {} is too long to resize", inSize, s.out);
  for (std::int64_t r = 0; r < s.out; ++r) {
    double x = 0.0;
    if (!sourceCoordinate(options, s, inSize, r, x)) {
      taps.extrapolated.push_back(r);  // weight 0 everywhere: the value comes from the fill
      continue;
    }
    double base = std::floor(x);
    double ratio = x - base;
    if (ratio == 0.0) {
      base -= 1.0;
      ratio = 1.0;
    }
    std::int64_t first = static_cast<std::int64_t>(base);
    double w[4] = {0.0, 0.0, 0.0, 0.0};
    switch (options.mode) {
      case Mode::Nearest: {
        bool up = true;  // base + 1; a whole x (ratio 1) is always itself
        if (ratio < 1.0) {
          switch (options.nearest) {
            case NearestRounding::RoundPreferFloor:
              up = ratio > 0.5;
              break;
            case NearestRounding::RoundPreferCeil:
              up = ratio >= 0.5;
              break;
            case NearestRounding::Floor:
              up = false;
              break;
            case NearestRounding::Ceil:
              up = true;
              break;
          }
        }
        first += up ? 1 : 0;
        w[0] = 1.0;
        break;
      }
      case Mode::Linear:
        w[0] = 1.0 - ratio;
        w[1] = ratio;
        break;
      case Mode::Cubic:
        first -= 1;
        cubicWeights(ratio, options.cubicA, w);
        break;
    }
    if (options.excludeOutside) {
      double sum = 0.0;
      double kept[4];
      for (int t = 0; t < taps.taps; ++t) {
        const std::int64_t i = first + t;
        kept[t] = i >= 0 && i < inSize ? w[t] : 0.0;
        sum += kept[t];
      }
      if (sum != 0.0) {
        for (int t = 0; t < taps.taps; ++t)
          w[t] = kept[t] / sum;
      }
    }
    for (int t = 0; t < taps.taps; ++t) {
      const std::size_t slot = static_cast<std::size_t>(t) * n + static_cast<std::size_t>(r);
      taps.index[slot] = static_cast<std::int32_t>(std::clamp<std::int64_t>(first + t, 0, inSize - 1));
      taps.weight[slot] = w[t];
    }
  }
  return taps;
}

// Whether the taps copy the input: every output position reads its own position with weight 1.
bool isIdentity(const AxisTaps& taps) {
  if (taps.outSize != taps.inSize || !taps.extrapolated.empty())
    return false;
  const auto n = static_cast<std::size_t>(taps.outSize);
  for (std::size_t r = 0; r < n; ++r) {
    for (int t = 0; t < taps.taps; ++t) {
      const std::size_t slot = static_cast<std::size_t>(t) * n + r;
      const bool own = static_cast<std::size_t>(taps.index[slot]) == r;
      if (taps.weight[slot] != 0.0 && !own)
        return false;
    }
    double sum = 0.0;
    for (int t = 0; t < taps.taps; ++t) {
      const std::size_t slot = static_cast<std::size_t>(t) * n + r;
      if (static_cast<std::size_t>(taps.index[slot]) == r)
        sum += taps.weight[slot];
    }
    if (sum != 1.0)
      return false;
  }
  return true;
}

std::int64_t storedAxis(std::size_t axis, std::size_t rank, bool channelsLast) {
  if (!channelsLast || rank < 3 || axis == 0)
    return static_cast<std::int64_t>(axis);
  return axis == 1 ? static_cast<std::int64_t>(rank) - 1 : static_cast<std::int64_t>(axis) - 1;
}

Shape channelsFirstView(const Shape& stored, bool channelsLast) {
  if (!channelsLast || stored.size() < 3)
    return stored;
  Shape shape{stored[0], stored.back()};
  shape.insert(shape.end(), stored.begin() + 1, stored.end() - 1);
  return shape;
}

}  // namespace

Options readOptions(const Attributes& attrs) {
  Options options;
  options.mode = modeOf(attrs.getString("mode", "nearest"));
  options.coordinates = coordinatesOf(attrs.getString("coordinate_transformation_mode", "half_pixel"));
  options.nearest = roundingOf(attrs.getString("nearest_mode", "round_prefer_floor"));
  options.cubicA = attrs.getFloat("cubic_coeff_a", -0.75F);
  options.excludeOutside = attrs.getInt("exclude_outside", 0) != 0;
  options.extrapolation = attrs.getFloat("extrapolation_value", 0.0F);
  if (attrs.getInt("antialias", 0) != 0)
    fail("antialias = 1 is not supported");
  const std::string policy = attrs.getString("keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch")
    fail("keep_aspect_ratio_policy '{}' is not supported (only stretch)", policy);
  if (attrs.has("axes"))
    fail("an axes attribute is not supported (scales and sizes must cover every axis)");
  return options;
}

Shape outputShape(const Options& options, const Shape& inShape, const Operands& operands) {
  Shape out;
  for (const AxisSize& s : axisSizes(options, inShape, operands))
    out.push_back(s.out);
  return out;
}

Plan makePlan(const Options& options, const Shape& storedShape, bool channelsLast, const Operands& operands) {
  Plan plan;
  plan.options = options;
  plan.inShape = storedShape;
  const Shape logical = channelsFirstView(storedShape, channelsLast);
  const std::vector<AxisSize> sizes = axisSizes(options, logical, operands);
  const std::size_t rank = logical.size();
  plan.outShape = storedShape;
  for (std::size_t a = 0; a < rank; ++a) {
    const std::int64_t stored = storedAxis(a, rank, channelsLast);
    plan.outShape[static_cast<std::size_t>(stored)] = sizes[a].out;
    if (sizes[a].out == 0 || logical[a] == 0)
      continue;  // an empty output: nothing to sample
    AxisTaps taps = axisTaps(options, sizes[a], logical[a]);
    taps.axis = stored;
    if (!isIdentity(taps))
      plan.passes.push_back(std::move(taps));
  }
  // Shrinking axes first (each pass's work is its output's size), then the innermost first among equals: the
  // innermost axis's pass gathers single elements, the others move whole contiguous rows.
  std::stable_sort(plan.passes.begin(), plan.passes.end(), [](const AxisTaps& a, const AxisTaps& b) {
    const double ra = static_cast<double>(a.outSize) / static_cast<double>(a.inSize);
    const double rb = static_cast<double>(b.outSize) / static_cast<double>(b.inSize);
    if (ra != rb)
      return ra < rb;
    return a.axis > b.axis;
  });
  return plan;
}

AxisAdjoint adjointOf(const AxisTaps& taps) {
  AxisAdjoint adjoint;
  const auto n = static_cast<std::size_t>(taps.outSize);
  adjoint.first.assign(static_cast<std::size_t>(taps.inSize) + 1, 0);
  for (std::size_t slot = 0; slot < taps.weight.size(); ++slot) {
    if (taps.weight[slot] != 0.0)
      ++adjoint.first[static_cast<std::size_t>(taps.index[slot]) + 1];
  }
  std::partial_sum(adjoint.first.begin(), adjoint.first.end(), adjoint.first.begin());
  adjoint.source.resize(static_cast<std::size_t>(adjoint.first.back()));
  adjoint.weight.resize(adjoint.source.size());
  std::vector<std::int64_t> fill(adjoint.first.begin(), adjoint.first.end() - 1);
  // Output position by output position (taps in order within each): each list comes out in increasing output
  // position, a fixed summation order.
  for (std::size_t r = 0; r < n; ++r) {
    for (int t = 0; t < taps.taps; ++t) {
      const std::size_t slot = static_cast<std::size_t>(t) * n + r;
      if (taps.weight[slot] == 0.0)
        continue;
      const auto k = static_cast<std::size_t>(fill[static_cast<std::size_t>(taps.index[slot])]++);
      adjoint.source[k] = static_cast<std::int32_t>(r);
      adjoint.weight[k] = taps.weight[slot];
    }
  }
  return adjoint;
}

}  // namespace strata::cpu::resize
