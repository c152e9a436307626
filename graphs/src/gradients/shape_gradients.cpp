// Gradient rules of the shape and data-movement ops. Most backward graphs are the forward ops run the other way
// (Reshape back, the inverse Transpose, Split for Concat, Concat for Split, ReduceSum over tiles); the scatters use
// the SliceGrad, GatherGrad and PadGrad kernels (core/backend/cpu/grad_shape_ops.cpp) and ScatterElements.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/graphs/gradient_registry.h"

namespace strata::gradients {

namespace {

[[noreturn]] void ruleError(const GradientBuilder& b, const std::string& why) {
  fail("gradient of node '{}' ({}): {}", b.node().name, b.node().opType, why);
}

std::vector<std::int64_t> toInts(const Tensor& t) {
  std::vector<std::int64_t> values(static_cast<std::size_t>(t.numel()));
  visitDType(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_arithmetic_v<T>) {
      const T* data = t.data<T>();
      for (std::size_t i = 0; i < values.size(); ++i)
        values[i] = static_cast<std::int64_t>(data[i]);
    } else {
      fail("expected an integer tensor, got {}", dtypeName(t.dtype()));
    }
  });
  return values;
}

// The plan-time value of input i as integers (shapes, axes, pads, repeats); shape inference already required it.
std::vector<std::int64_t> constantInts(const GradientBuilder& b, std::size_t i, const char* what) {
  const Tensor* value = b.constantOf(b.input(i));
  if (value == nullptr)
    ruleError(b, fmt::format("{} (input {}) is not a plan-time constant", what, i));
  return toInts(*value);
}

std::int64_t normalizedAxis(const GradientBuilder& b, std::int64_t axis, std::int64_t rank) {
  if (axis < -rank || axis >= rank)
    ruleError(b, fmt::format("axis {} is out of range for rank {}", axis, rank));
  return axis < 0 ? axis + rank : axis;
}

std::vector<int> noGrads(const GradientBuilder& b) {
  return std::vector<int>(b.node().inputs.size(), kNoValue);
}

// Shapes and metas are copied out of the builder: emitting a node may grow its value table, which would leave a
// reference into it dangling.
Shape inputShape(const GradientBuilder& b, std::size_t i) {
  return b.meta(b.input(i)).shape;
}

int reshapeTo(GradientBuilder& b, int grad, Shape shape) {
  if (b.meta(grad).shape == shape)
    return grad;
  Attributes attrs;
  attrs.set("allowzero", std::int64_t{1});  // a 0 in the shape is a real empty dim, not "copy the input's"
  return b.emit1("Reshape", {grad, b.int64s(shape)}, std::move(attrs));
}

// Zeros of a value's dtype and shape, made at run time (a backward temporary, not a plan-time constant).
int zerosOf(GradientBuilder& b, TensorMeta meta) {
  Attributes attrs;
  attrs.set("value", Tensor::zeros(meta.dtype, {1}));
  return b.emit1("ConstantOfShape", {b.int64s(meta.shape)}, std::move(attrs));
}

// Reshape, Flatten, Squeeze, Unsqueeze: the gradient is dY with the input's shape.
std::vector<int> reshapeGrad(GradientBuilder& b) {
  auto grads = noGrads(b);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue || !b.needsInputGrad(0))
    return grads;
  grads[0] = reshapeTo(b, dy, inputShape(b, 0));
  return grads;
}

std::vector<int> transposeGrad(GradientBuilder& b) {
  auto grads = noGrads(b);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue || !b.needsInputGrad(0))
    return grads;
  const auto rank = static_cast<std::int64_t>(inputShape(b, 0).size());
  std::vector<std::int64_t> perm = b.node().attrs.getInts("perm", {});
  if (perm.empty()) {
    perm.resize(static_cast<std::size_t>(rank));
    std::iota(perm.rbegin(), perm.rend(), std::int64_t{0});
  }
  if (static_cast<std::int64_t>(perm.size()) != rank)
    ruleError(b, "perm does not match the input rank");
  std::vector<std::int64_t> inverse(perm.size());
  bool identity = true;
  for (std::size_t i = 0; i < perm.size(); ++i) {
    const std::int64_t p = normalizedAxis(b, perm[i], rank);
    inverse[static_cast<std::size_t>(p)] = static_cast<std::int64_t>(i);
    identity = identity && p == static_cast<std::int64_t>(i);
  }
  if (identity) {
    grads[0] = dy;
    return grads;
  }
  Attributes attrs;
  attrs.set("perm", inverse);
  grads[0] = b.emit1("Transpose", {dy}, std::move(attrs));
  return grads;
}

// Concat: each input's gradient is its part of dY along the axis.
std::vector<int> concatGrad(GradientBuilder& b) {
  auto grads = noGrads(b);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue)
    return grads;
  const std::size_t n = b.node().inputs.size();
  const auto rank = static_cast<std::int64_t>(inputShape(b, 0).size());
  const std::int64_t axis = normalizedAxis(b, b.node().attrs.getInt("axis"), rank);
  std::vector<std::int64_t> sizes(n);
  std::size_t needed = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sizes[i] = inputShape(b, i)[static_cast<std::size_t>(axis)];
    if (b.needsInputGrad(i))
      ++needed;
  }
  if (needed == 0)
    return grads;
  if (n == 1) {
    grads[0] = dy;
    return grads;
  }
  if (needed == n) {
    // One pass over dY for all parts.
    Attributes attrs;
    attrs.set("axis", axis);
    const auto parts = b.emit("Split", {dy, b.int64s(sizes)}, std::move(attrs), n);
    for (std::size_t i = 0; i < n; ++i)
      grads[i] = parts[i];
    return grads;
  }
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (b.needsInputGrad(i)) {
      grads[i] = b.emit1("Slice", {dy, b.int64s({offset}), b.int64s({offset + sizes[i]}), b.int64s({axis})});
    }
    offset += sizes[i];
  }
  return grads;
}

// Split: the input's gradient is the output gradients concatenated; outputs nobody differentiates contribute zeros.
std::vector<int> splitGrad(GradientBuilder& b) {
  auto grads = noGrads(b);
  if (!b.needsInputGrad(0))
    return grads;
  const std::size_t n = b.node().outputs.size();
  const auto rank = static_cast<std::int64_t>(inputShape(b, 0).size());
  const std::int64_t axis = normalizedAxis(b, b.node().attrs.getInt("axis", 0), rank);
  bool any = false;
  for (std::size_t i = 0; i < n; ++i)
    any = any || b.outputGrad(i) != kNoValue;
  if (!any)
    return grads;
  std::vector<int> parts;
  for (std::size_t i = 0; i < n; ++i) {
    const int dy = b.outputGrad(i);
    if (dy != kNoValue) {
      parts.push_back(dy);
      continue;
    }
    if (b.output(i) == kNoValue)
      ruleError(b, fmt::format("output {} is absent, so its size is unknown", i));
    const TensorMeta meta = b.meta(b.output(i));
    if (meta.shape[static_cast<std::size_t>(axis)] > 0)
      parts.push_back(zerosOf(b, meta));  // empty parts add nothing
  }
  if (parts.size() == 1) {
    grads[0] = reshapeTo(b, parts[0], inputShape(b, 0));
    return grads;
  }
  Attributes attrs;
  attrs.set("axis", axis);
  grads[0] = b.emit1("Concat", parts, std::move(attrs));
  return grads;
}

// Slice: dY scattered into zeros of the input's shape. Operands are passed as attributes so opset-1 Slice (which
// has them as attributes) and opset-10+ Slice (constant inputs) emit the same node.
std::vector<int> sliceGrad(GradientBuilder& b) {
  auto grads = noGrads(b);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue || !b.needsInputGrad(0))
    return grads;
  const Attributes& fwd = b.node().attrs;
  const std::size_t inputCount = b.node().inputs.size();
  auto operand = [&](std::size_t i, const char* name) {
    if (inputCount >= 3) {
      return i < inputCount && b.input(i) != kNoValue ? constantInts(b, i, name) : std::vector<std::int64_t>{};
    }
    return fwd.getInts(name, {});
  };
  Attributes attrs;
  attrs.set("starts", operand(1, "starts"));
  attrs.set("ends", operand(2, "ends"));
  attrs.set("axes", operand(3, "axes"));
  attrs.set("steps", operand(4, "steps"));
  attrs.set("shape", inputShape(b, 0));
  grads[0] = b.emit1("SliceGrad", {dy}, std::move(attrs));
  return grads;
}

std::vector<int> expandGrad(GradientBuilder& b) {
  auto grads = noGrads(b);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue || !b.needsInputGrad(0))
    return grads;
  grads[0] = b.sumToShape(dy, inputShape(b, 0));
  return grads;
}

// Tile: view dY of shape [r0 * d0, r1 * d1, ...] as [r0, d0, r1, d1, ...] and sum over the repeat axes.
std::vector<int> tileGrad(GradientBuilder& b) {
  auto grads = noGrads(b);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue || !b.needsInputGrad(0))
    return grads;
  const Shape in = inputShape(b, 0);
  const auto repeats = constantInts(b, 1, "repeats");
  if (repeats.size() != in.size())
    ruleError(b, "repeats must have one entry per input axis");
  Shape view;
  std::vector<std::int64_t> axes;
  for (std::size_t k = 0; k < in.size(); ++k) {
    if (repeats[k] == 0) {
      // Nothing was read: the gradient is zero.
      grads[0] = zerosOf(b, b.meta(b.input(0)));
      return grads;
    }
    if (repeats[k] != 1) {
      axes.push_back(static_cast<std::int64_t>(view.size()));
      view.push_back(repeats[k]);
    }
    view.push_back(in[k]);
  }
  if (axes.empty()) {
    grads[0] = dy;
    return grads;
  }
  Attributes attrs;
  attrs.set("keepdims", std::int64_t{0});
  grads[0] = b.emit1("ReduceSum", {reshapeTo(b, dy, view), b.int64s(axes)}, std::move(attrs));
  return grads;
}

// Gather: rows of dY added into zeros of the data's shape at the gathered indices (repeats accumulate).
std::vector<int> gatherGrad(GradientBuilder& b) {
  auto grads = noGrads(b);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue || !b.needsInputGrad(0))
    return grads;
  const Shape shape = inputShape(b, 0);
  Attributes attrs;
  attrs.set("axis", normalizedAxis(b, b.node().attrs.getInt("axis", 0), static_cast<std::int64_t>(shape.size())));
  attrs.set("shape", shape);
  grads[0] = b.emit1("GatherGrad", {dy, b.input(1)}, std::move(attrs));
  return grads;
}

// GatherElements: ScatterElements with reduction add into zeros (it applies repeated indices in order).
std::vector<int> gatherElementsGrad(GradientBuilder& b) {
  auto grads = noGrads(b);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue || !b.needsInputGrad(0))
    return grads;
  Attributes attrs;
  attrs.set("axis", b.node().attrs.getInt("axis", 0));
  attrs.set("reduction", std::string("add"));
  grads[0] = b.emit1("ScatterElements", {zerosOf(b, b.meta(b.input(0))), b.input(1), dy}, std::move(attrs));
  return grads;
}

// Pad: constant mode with non-negative pads reads the input once, so its gradient is the middle of dY (a Slice);
// reflect, edge, wrap and cropping (negative pads) fold dY back with PadGrad.
std::vector<int> padGrad(GradientBuilder& b) {
  auto grads = noGrads(b);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue || !b.needsInputGrad(0))
    return grads;
  const Shape shape = inputShape(b, 0);
  const auto rank = static_cast<std::int64_t>(shape.size());
  const std::size_t inputCount = b.node().inputs.size();
  const bool padsInput = inputCount > 1 && b.input(1) != kNoValue;
  const auto pads = padsInput ? constantInts(b, 1, "pads") : b.node().attrs.getInts("pads");
  std::vector<std::int64_t> axes;
  if (inputCount > 3 && b.input(3) != kNoValue) {
    axes = constantInts(b, 3, "axes");
  } else {
    axes.resize(shape.size());
    std::iota(axes.begin(), axes.end(), std::int64_t{0});
  }
  if (pads.size() != 2 * axes.size())
    ruleError(b, "pads must have two entries per padded axis");
  std::vector<std::int64_t> begin(shape.size(), 0), end(shape.size(), 0);
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const auto a = static_cast<std::size_t>(normalizedAxis(b, axes[i], rank));
    begin[a] = pads[i];
    end[a] = pads[i + axes.size()];
  }
  const std::string mode = b.node().attrs.getString("mode", "constant");
  const bool noPadding = std::all_of(begin.begin(), begin.end(), [](std::int64_t p) { return p == 0; }) &&
                         std::all_of(end.begin(), end.end(), [](std::int64_t p) { return p == 0; });
  if (noPadding) {
    grads[0] = dy;
    return grads;
  }
  const bool nonNegative = std::all_of(begin.begin(), begin.end(), [](std::int64_t p) { return p >= 0; }) &&
                           std::all_of(end.begin(), end.end(), [](std::int64_t p) { return p >= 0; });
  if (mode == "constant" && nonNegative) {
    std::vector<std::int64_t> starts, ends, sliceAxes;
    for (std::size_t k = 0; k < shape.size(); ++k) {
      if (begin[k] == 0 && end[k] == 0)
        continue;
      starts.push_back(begin[k]);
      ends.push_back(begin[k] + shape[k]);
      sliceAxes.push_back(static_cast<std::int64_t>(k));
    }
    grads[0] = b.emit1("Slice", {dy, b.int64s(starts), b.int64s(ends), b.int64s(sliceAxes)});
    return grads;
  }
  std::vector<std::int64_t> flat = begin;
  flat.insert(flat.end(), end.begin(), end.end());
  Attributes attrs;
  attrs.set("mode", mode);
  attrs.set("pads", flat);
  attrs.set("shape", shape);
  grads[0] = b.emit1("PadGrad", {dy}, std::move(attrs));
  return grads;
}

// DepthToSpace DCR and SpaceToDepth are each other's inverse; CRD's inverse is spelled out as
// Reshape-Transpose-Reshape.
std::vector<int> depthToSpaceGrad(GradientBuilder& b) {
  auto grads = noGrads(b);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue || !b.needsInputGrad(0))
    return grads;
  const std::int64_t block = b.node().attrs.getInt("blocksize");
  const std::string mode = b.node().attrs.getString("mode", "DCR");
  if (mode == "DCR") {
    Attributes attrs;
    attrs.set("blocksize", block);
    grads[0] = b.emit1("SpaceToDepth", {dy}, std::move(attrs));
    return grads;
  }
  if (mode != "CRD")
    ruleError(b, fmt::format("unknown mode '{}'", mode));
  // Forward CRD: y[n, c, h, i, w, j] = x[n, c, i, j, h, w] (y viewed 6-D).
  const Shape in = inputShape(b, 0);
  const std::int64_t n = in[0], c = in[1] / (block * block), h = in[2], w = in[3];
  Attributes attrs;
  attrs.set("perm", std::vector<std::int64_t>{0, 1, 3, 5, 2, 4});
  const int moved = b.emit1("Transpose", {reshapeTo(b, dy, {n, c, h, block, w, block})}, std::move(attrs));
  grads[0] = reshapeTo(b, moved, in);
  return grads;
}

std::vector<int> spaceToDepthGrad(GradientBuilder& b) {
  auto grads = noGrads(b);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue || !b.needsInputGrad(0))
    return grads;
  Attributes attrs;
  attrs.set("blocksize", b.node().attrs.getInt("blocksize"));
  attrs.set("mode", std::string("DCR"));
  grads[0] = b.emit1("DepthToSpace", {dy}, std::move(attrs));
  return grads;
}

}  // namespace

void registerShapeGradients(GradientRegistry& registry) {
  registry.add("Reshape", reshapeGrad, {1});
  registry.add("Flatten", reshapeGrad);
  registry.add("Squeeze", reshapeGrad, {1});
  registry.add("Unsqueeze", reshapeGrad, {1});
  registry.add("Transpose", transposeGrad);
  registry.add("Concat", concatGrad);
  registry.add("Split", splitGrad, {1});
  registry.add("Slice", sliceGrad, {1, 2, 3, 4});
  registry.add("Expand", expandGrad, {1});
  registry.add("Tile", tileGrad, {1});
  registry.add("Gather", gatherGrad, {1});
  registry.add("GatherElements", gatherElementsGrad, {1});
  registry.add("Pad", padGrad, {1, 2, 3});
  registry.add("DepthToSpace", depthToSpaceGrad);
  registry.add("SpaceToDepth", spaceToDepthGrad);
}

}  // namespace strata::gradients
