#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "strata/attributes.h"
#include "strata/graphs/graph.h"

namespace strata {

// What a gradient rule sees and how it emits backward nodes. Backward nodes are ordinary IR nodes (forward ops
// such as MatMul or ReduceSum, or gradient kernels such as ReluGrad); their output shapes are inferred as soon as
// they are emitted, so a rule can read them back with meta().
class GradientBuilder {
 public:
  virtual ~GradientBuilder() = default;

  // The forward node being differentiated.
  virtual const Node& node() const = 0;
  // Static dtype and shape of any value (forward or backward). The reference is valid until the next emit() or
  // constant(), which grow the value table: copy what must outlive them.
  virtual const TensorMeta& meta(int value) const = 0;
  // The constant value of a value, or nullptr (e.g. a Reshape's shape, a Clip's min).
  virtual const Tensor* constantOf(int value) const = 0;
  int input(std::size_t i) const { return i < node().inputs.size() ? node().inputs[i] : kNoValue; }
  int output(std::size_t i) const { return i < node().outputs.size() ? node().outputs[i] : kNoValue; }
  // The gradient flowing into forward output i; kNoValue when nothing downstream needs it.
  virtual int outputGrad(std::size_t i) const = 0;
  // Whether the gradient of forward input i is wanted (it leads to a trainable parameter); rules may skip the rest.
  virtual bool needsInputGrad(std::size_t i) const = 0;

  // Emits a backward node and returns its output value ids (outputCount of them).
  virtual std::vector<int> emit(const std::string& opType, const std::vector<int>& inputs, Attributes attrs = {},
                                std::size_t outputCount = 1) = 0;
  int emit1(const std::string& opType, const std::vector<int>& inputs, Attributes attrs = {}) {
    return emit(opType, inputs, std::move(attrs), 1)[0];
  }
  // A literal constant value (not a parameter).
  virtual int constant(Tensor value) = 0;
  // Helpers over emit/constant.
  int int64s(const std::vector<std::int64_t>& values);
  // A 0-d constant with like's dtype.
  int scalarLike(double value, int like);
  // Sums a gradient of a broadcast result back to `shape` (numpy broadcasting in reverse); returns grad itself
  // when the shapes already match.
  int sumToShape(int grad, const Shape& shape);
};

// Returns one gradient value id per forward input, kNoValue where no gradient flows (or none is needed).
using GradientRule = std::function<std::vector<int>(GradientBuilder&)>;

struct GradientRuleInfo {
  GradientRule rule;
  // Inputs that never carry gradients: shapes, indices, bounds, ratios, labels, running statistics.
  std::vector<std::size_t> nonDifferentiableInputs;
};

// Per-op gradient rules, keyed by op type.
class GradientRegistry {
 public:
  // The registry with every built-in rule registered.
  static GradientRegistry& instance();
  void add(const std::string& opType, GradientRule rule, std::vector<std::size_t> nonDifferentiableInputs = {});
  const GradientRuleInfo* find(std::string_view opType) const;

 private:
  std::map<std::string, GradientRuleInfo, std::less<>> rules_;
};

namespace gradients {
// Each family registers its rules here (graphs/src/gradients/*.cpp).
void registerElementwiseGradients(GradientRegistry& registry);  // activations, arithmetic, Where, Cast, Dropout, ...
void registerReductionGradients(GradientRegistry& registry);    // Reduce*, Softmax, LogSoftmax, LayerNorm, losses
void registerShapeGradients(GradientRegistry& registry);        // Reshape, Transpose, Concat, Split, Slice, Gather, ...
void registerNnGradients(GradientRegistry& registry);           // Conv, pooling, BatchNormalization, Gemm, MatMul
void registerAttentionGradients(GradientRegistry& registry);    // ScaledDotProductAttention (fused attention)
void registerResizeGradients(GradientRegistry& registry);       // Resize
void registerEinsumGradients(GradientRegistry& registry);       // Einsum
}  // namespace gradients

}  // namespace strata
