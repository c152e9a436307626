// Gradient rules of the neural-network ops: Conv, ConvTranspose, pooling, BatchNormalization,
// InstanceNormalization, Gemm and MatMul. Conv, pooling and batch norm emit the gradient kernels of
// core/backend/cpu/grad_nn_*.cpp; Gemm and MatMul are expressed with forward Gemm / MatMul nodes.

#include <initializer_list>

#include "strata/error.h"
#include "strata/graphs/gradient_registry.h"

namespace strata::gradients {
namespace {

std::vector<int> noGrads(const GradientBuilder& b) {
  return std::vector<int>(b.node().inputs.size(), kNoValue);
}

bool wants(const GradientBuilder& b, std::size_t i) {
  return b.input(i) != kNoValue && b.needsInputGrad(i);
}

// The forward attributes named in `names` that the node sets.
Attributes copyAttrs(const Attributes& from, std::initializer_list<const char*> names) {
  Attributes to;
  for (const char* name : names) {
    auto it = from.all().find(name);
    if (it != from.all().end())
      to.set(name, it->second);
  }
  return to;
}

Attributes ints(std::initializer_list<std::pair<const char*, std::int64_t>> values) {
  Attributes attrs;
  for (const auto& [name, value] : values)
    attrs.set(name, value);
  return attrs;
}

// Sum over N and the spatial dims: a per-channel bias gradient from dY [N, C, spatial...] (or [N, spatial..., C]
// for channels-last nodes).
int biasGrad(GradientBuilder& b, int dy) {
  std::vector<std::int64_t> axes{0};
  const std::size_t rank = b.meta(dy).shape.size();
  const bool channelsLast = b.node().attrs.getInt("channels_last", 0) != 0;
  for (std::size_t i = channelsLast ? 1 : 2; i < (channelsLast ? rank - 1 : rank); ++i)
    axes.push_back(static_cast<std::int64_t>(i));
  return b.emit1("ReduceSum", {dy, b.int64s(axes)}, ints({{"keepdims", 0}}));
}

// ---- Conv ----

std::vector<int> convGradient(GradientBuilder& b) {
  std::vector<int> grads = noGrads(b);
  int dy = b.outputGrad(0);
  if (dy == kNoValue)
    return grads;
  if (b.node().attrs.getInt("fused_clip", 0) != 0)
    fail("node '{}': a Conv with a fused Clip is for inference plans only (fuseClipIntoConv)", b.node().name);
  if (b.node().attrs.getInt("fused_relu", 0) != 0)
    dy = b.emit1("ReluGrad", {dy, b.output(0)});  // Note [Fused ReLU]: the Relu's rule first
  const int x = b.input(0), w = b.input(1);
  const bool needX = wants(b, 0), needW = wants(b, 1), needB = wants(b, 2);
  Attributes attrs =
      copyAttrs(b.node().attrs, {"auto_pad", "channels_last", "dilations", "group", "kernel_shape", "pads", "strides"});
  if (needX && needW) {
    // One node for both: dY is converted to oneDNN's layout once (grad_nn_conv.cpp).
    const std::vector<int> outs = b.emit("ConvGrad", {dy, x, w}, attrs, needB ? 3 : 2);
    grads[0] = outs[0];
    grads[1] = outs[1];
    if (needB)
      grads[2] = outs[2];
    return grads;
  }
  if (needW) {
    attrs.set("weight_shape", b.meta(w).shape);
    const std::vector<int> outs = b.emit("ConvGradWeight", {dy, x}, attrs, needB ? 2 : 1);
    grads[1] = outs[0];
    if (needB)
      grads[2] = outs[1];
    return grads;
  }
  if (needX) {
    attrs.set("input_shape", b.meta(x).shape);
    grads[0] = b.emit1("ConvGradInput", {dy, w}, attrs);
  }
  if (needB)
    grads[2] = biasGrad(b, dy);
  return grads;
}

// ConvTranspose is the data gradient of a Conv whose input has Y's shape: dX is that Conv's forward and dW its
// weight gradient with the roles of X and dY swapped. Explicit pads only (auto_pad and output_shape would need the
// pads the forward kernel derives).
std::vector<int> convTransposeGradient(GradientBuilder& b) {
  std::vector<int> grads = noGrads(b);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue)
    return grads;
  const Attributes& forward = b.node().attrs;
  if (forward.has("output_shape") || forward.getString("auto_pad", "NOTSET") != "NOTSET") {
    fail("node '{}': the ConvTranspose gradient supports explicit pads only (no output_shape or auto_pad)",
         b.node().name);
  }
  const int x = b.input(0), w = b.input(1);
  Attributes attrs = copyAttrs(forward, {"dilations", "group", "kernel_shape", "pads", "strides"});
  if (wants(b, 0))
    grads[0] = b.emit1("Conv", {dy, w}, attrs);
  if (wants(b, 1)) {
    Attributes weightAttrs = attrs;
    weightAttrs.set("weight_shape", b.meta(w).shape);
    grads[1] = b.emit1("ConvGradWeight", {x, dy}, weightAttrs);
  }
  if (wants(b, 2))
    grads[2] = biasGrad(b, dy);
  return grads;
}

// ---- Pooling ----

std::vector<std::int64_t> spatialDims(const Shape& shape) {
  return {shape.begin() + 2, shape.end()};
}

std::vector<int> maxPoolGradient(GradientBuilder& b) {
  std::vector<int> grads = noGrads(b);
  const int dy = b.outputGrad(0);  // Indices (output 1) carries no gradient
  if (dy == kNoValue || !wants(b, 0))
    return grads;
  Attributes attrs = copyAttrs(
      b.node().attrs, {"auto_pad", "ceil_mode", "channels_last", "dilations", "kernel_shape", "pads", "strides"});
  if (b.node().opType == "GlobalMaxPool")
    attrs.set("kernel_shape", spatialDims(b.meta(b.input(0)).shape));
  grads[0] = b.emit1("MaxPoolGrad", {dy, b.input(0)}, attrs);
  return grads;
}

std::vector<int> averagePoolGradient(GradientBuilder& b) {
  std::vector<int> grads = noGrads(b);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue || !wants(b, 0))
    return grads;
  const Shape x = b.meta(b.input(0)).shape;
  Attributes attrs = copyAttrs(b.node().attrs, {"auto_pad", "ceil_mode", "channels_last", "count_include_pad",
                                                "dilations", "kernel_shape", "pads", "strides"});
  if (b.node().opType == "GlobalAveragePool")
    attrs.set("kernel_shape", spatialDims(x));
  attrs.set("input_shape", x);
  grads[0] = b.emit1("AveragePoolGrad", {dy}, attrs);
  return grads;
}

// ---- Normalisation ----

// Training mode differentiates through the batch statistics; inference mode (training_mode = 0) scales by the
// running ones. Running mean / var (inputs 3, 4) and the running-statistics outputs carry no gradient.
std::vector<int> batchNormGradient(GradientBuilder& b) {
  std::vector<int> grads = noGrads(b);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue || !(wants(b, 0) || wants(b, 1) || wants(b, 2)))
    return grads;
  const bool training = b.node().attrs.getInt("training_mode", 0) != 0;
  Attributes attrs;
  attrs.set("epsilon", b.node().attrs.getFloat("epsilon", 1e-5f));
  attrs.set("training_mode", std::int64_t{training ? 1 : 0});
  if (b.node().attrs.has("channels_last"))
    attrs.set("channels_last", b.node().attrs.getInt("channels_last"));
  std::vector<int> inputs{dy, b.input(0), b.input(1)};
  if (!training) {
    inputs.push_back(b.input(3));
    inputs.push_back(b.input(4));
  }
  if (b.node().attrs.getInt("fused_relu", 0) != 0) {
    // Note [Fused ReLU]: the kernel gates dY by the node's own output, Relu's gradient rule.
    attrs.set("fused_relu", std::int64_t{1});
    inputs.resize(5, kNoValue);
    inputs.push_back(b.output(0));
  }
  const std::vector<int> outs = b.emit("BatchNormalizationGrad", inputs, attrs, 3);
  for (std::size_t i = 0; i < 3; ++i) {
    if (wants(b, i))
      grads[i] = outs[i];
  }
  return grads;
}

// InstanceNormalization is batch norm (training mode) of X viewed as [1, N * C, spatial] with the scale tiled N
// times; dScale and dB sum the tiled gradients over N.
std::vector<int> instanceNormGradient(GradientBuilder& b) {
  std::vector<int> grads = noGrads(b);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue || !(wants(b, 0) || wants(b, 1) || wants(b, 2)))
    return grads;
  const int x = b.input(0), scale = b.input(1);
  const Shape xShape = b.meta(x).shape;  // a copy: meta() references move as values are emitted
  const std::int64_t batch = xShape[0], channels = xShape[1];
  const Shape flat{1, batch * channels, numElements(xShape) / std::max<std::int64_t>(1, batch * channels)};
  const int tiled =
      b.emit1("Reshape",
              {b.emit1("Expand", {b.emit1("Reshape", {scale, b.int64s({1, channels})}), b.int64s({batch, channels})}),
               b.int64s({batch * channels})});
  Attributes attrs;
  attrs.set("epsilon", b.node().attrs.getFloat("epsilon", 1e-5f));
  attrs.set("training_mode", std::int64_t{1});
  const std::vector<int> outs =
      b.emit("BatchNormalizationGrad",
             {b.emit1("Reshape", {dy, b.int64s(flat)}), b.emit1("Reshape", {x, b.int64s(flat)}), tiled}, attrs, 3);
  if (wants(b, 0))
    grads[0] = b.emit1("Reshape", {outs[0], b.int64s(xShape)});
  for (std::size_t i = 1; i < 3; ++i) {
    if (!wants(b, i))
      continue;
    const int perSample = b.emit1("Reshape", {outs[i], b.int64s({batch, channels})});
    grads[i] = b.emit1("ReduceSum", {perSample, b.int64s({0})}, ints({{"keepdims", 0}}));
  }
  return grads;
}

// ---- Gemm: Y = alpha * A' B' + beta * C ----

std::vector<int> gemmGradient(GradientBuilder& b) {
  std::vector<int> grads = noGrads(b);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue)
    return grads;
  const Attributes& forward = b.node().attrs;
  const bool transA = forward.getInt("transA", 0) != 0, transB = forward.getInt("transB", 0) != 0;
  const float alpha = forward.getFloat("alpha", 1.0f), beta = forward.getFloat("beta", 1.0f);
  const int a = b.input(0), bm = b.input(1);
  auto gemm = [&](int lhs, int rhs, bool ta, bool tb) {
    Attributes attrs = ints({{"transA", ta ? 1 : 0}, {"transB", tb ? 1 : 0}});
    if (alpha != 1.0f)
      attrs.set("alpha", alpha);
    return b.emit1("Gemm", {lhs, rhs}, attrs);
  };
  if (wants(b, 0))
    grads[0] = transA ? gemm(bm, dy, transB, true) : gemm(dy, bm, false, !transB);
  if (wants(b, 1))
    grads[1] = transB ? gemm(dy, a, true, transA) : gemm(a, dy, !transA, false);
  if (wants(b, 2)) {
    const Shape cShape = b.meta(b.input(2)).shape;  // a copy: sumToShape emits before it reads the shape
    const int summed = b.sumToShape(dy, cShape);
    grads[2] = beta == 1.0f ? summed : b.emit1("Mul", {summed, b.scalarLike(beta, summed)});
  }
  return grads;
}

// ---- MatMul: numpy semantics (1-D operands promoted, batch dims broadcast) ----

// x with its last two dims swapped.
int transposeLast2(GradientBuilder& b, int x) {
  const std::size_t rank = b.meta(x).shape.size();
  std::vector<std::int64_t> perm(rank);
  for (std::size_t i = 0; i < rank; ++i)
    perm[i] = static_cast<std::int64_t>(i);
  std::swap(perm[rank - 1], perm[rank - 2]);
  Attributes attrs;
  attrs.set("perm", perm);
  return b.emit1("Transpose", {x}, attrs);
}

int reshape(GradientBuilder& b, int x, const Shape& shape) {
  return b.meta(x).shape == shape ? x : b.emit1("Reshape", {x, b.int64s(shape)});
}

std::vector<int> matmulGradient(GradientBuilder& b) {
  std::vector<int> grads = noGrads(b);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue)
    return grads;
  const int a = b.input(0), bm = b.input(1);
  const Shape aShape = b.meta(a).shape, bShape = b.meta(bm).shape, yShape = b.meta(dy).shape;
  const bool needA = wants(b, 0), needB = wants(b, 1);
  if (aShape.size() == 1 && bShape.size() == 1) {  // dot product: Y is a scalar
    if (needA)
      grads[0] = b.emit1("Mul", {dy, bm});
    if (needB)
      grads[1] = b.emit1("Mul", {dy, a});
    return grads;
  }
  auto gemm = [&](int lhs, int rhs, bool ta, bool tb) {
    return b.emit1("Gemm", {lhs, rhs}, ints({{"transA", ta ? 1 : 0}, {"transB", tb ? 1 : 0}}));
  };
  if (aShape.size() >= 2 && bShape.size() == 2) {
    // B is shared by every row of A (nn.Linear): flatten A's batch dims into rows and use plain GEMMs, no
    // transposes and no per-batch partial products to sum.
    const std::int64_t k = aShape.back(), n = bShape[1];
    const std::int64_t rows = numElements(aShape) / std::max<std::int64_t>(1, k);
    const int dy2 = reshape(b, dy, {rows, n});
    if (needA)
      grads[0] = reshape(b, gemm(dy2, bm, false, true), aShape);
    if (needB)
      grads[1] = gemm(reshape(b, a, {rows, k}), dy2, true, false);
    return grads;
  }
  // Promote 1-D operands as numpy does: A [K] -> [1, K], B [K] -> [K, 1]; dY gains the matching unit dim.
  Shape a2 = aShape, b2 = bShape, y2 = yShape;
  if (aShape.size() == 1) {
    a2 = {1, aShape[0]};
    y2.insert(y2.end() - 1, 1);
  }
  if (bShape.size() == 1) {
    b2 = {bShape[0], 1};
    y2.push_back(1);
  }
  const int dyFull = reshape(b, dy, y2);
  if (needA) {
    const int full = b.emit1("MatMul", {dyFull, transposeLast2(b, reshape(b, bm, b2))});
    grads[0] = reshape(b, b.sumToShape(full, a2), aShape);
  }
  if (needB) {
    const int full = b.emit1("MatMul", {transposeLast2(b, reshape(b, a, a2)), dyFull});
    grads[1] = reshape(b, b.sumToShape(full, b2), bShape);
  }
  return grads;
}

}  // namespace

void registerNnGradients(GradientRegistry& registry) {
  registry.add("Conv", convGradient);
  registry.add("ConvTranspose", convTransposeGradient);
  for (const char* type : {"MaxPool", "GlobalMaxPool"})
    registry.add(type, maxPoolGradient);
  for (const char* type : {"AveragePool", "GlobalAveragePool"})
    registry.add(type, averagePoolGradient);
  registry.add("BatchNormalization", batchNormGradient, {3, 4});
  registry.add("InstanceNormalization", instanceNormGradient);
  registry.add("Gemm", gemmGradient);
  registry.add("MatMul", matmulGradient);
}

}  // namespace strata::gradients
