#include "strata/graphs/gradient_registry.h"

#include <mutex>

#include "strata/error.h"

namespace strata {

int GradientBuilder::int64s(const std::vector<std::int64_t>& values) {
  Tensor t = Tensor::empty(DType::Int64, {static_cast<std::int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<std::int64_t>());
  return constant(std::move(t));
}

int GradientBuilder::scalarLike(double value, int like) {
  const DType dtype = meta(like).dtype;
  Tensor t = Tensor::empty(dtype, {});
  visitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, Half>) {
      t.data<Half>()->bits = floatToHalf(static_cast<float>(value));
    } else if constexpr (std::is_same_v<T, BFloat16Bits>) {
      t.data<BFloat16Bits>()->bits = floatToBFloat16(static_cast<float>(value));
    } else {
      *t.data<T>() = static_cast<T>(value);
    }
  });
  return constant(std::move(t));
}

int GradientBuilder::sumToShape(int grad, const Shape& targetShape) {
  // Copies: emitting grows the value table, which would leave references into it dangling.
  const Shape shape = targetShape;
  const Shape from = meta(grad).shape;
  if (from == shape) {
    return grad;
  }
  if (from.size() < shape.size()) {
    fail("node '{}': cannot sum a gradient of shape {} down to the larger rank of {}", node().name, shapeToString(from),
         shapeToString(shape));
  }
  const std::size_t lead = from.size() - shape.size();
  std::vector<std::int64_t> axes;
  for (std::size_t i = 0; i < from.size(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && from[i] != 1)) {
      axes.push_back(static_cast<std::int64_t>(i));
    }
  }
  int reduced = grad;
  if (!axes.empty()) {
    Attributes attrs;
    attrs.set("keepdims", std::int64_t{1});
    reduced = emit1("ReduceSum", {grad, int64s(axes)}, attrs);
  }
  if (meta(reduced).shape == shape) {
    return reduced;
  }
  return emit1("Reshape", {reduced, int64s(shape)});
}

GradientRegistry& GradientRegistry::instance() {
  static GradientRegistry registry;
  static std::once_flag once;
  std::call_once(once, [] {
    gradients::registerElementwiseGradients(registry);
    gradients::registerReductionGradients(registry);
    gradients::registerShapeGradients(registry);
    gradients::registerNnGradients(registry);
    gradients::registerAttentionGradients(registry);
    gradients::registerResizeGradients(registry);
    gradients::registerEinsumGradients(registry);
  });
  return registry;
}

void GradientRegistry::add(const std::string& opType, GradientRule rule,
                           std::vector<std::size_t> nonDifferentiableInputs) {
  rules_[opType] = GradientRuleInfo{std::move(rule), std::move(nonDifferentiableInputs)};
}

const GradientRuleInfo* GradientRegistry::find(std::string_view opType) const {
  auto it = rules_.find(opType);
  return it == rules_.end() ? nullptr : &it->second;
}

}  // namespace strata
