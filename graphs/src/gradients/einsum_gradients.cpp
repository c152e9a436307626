// Einsum's gradient rule: each operand's gradient is itself an Einsum, of the output gradient with the other
// operands (Note [Einsum gradient]).

#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "strata/einsum_equation.h"
#include "strata/error.h"
#include "strata/graphs/gradient_registry.h"

namespace strata::gradients {
namespace {

// Note [Einsum gradient]: for Y = einsum(A_1, ..., A_n -> O), dX_i[A_i] = sum over every other letter of
// dY[O] * prod_{j != i} X_j[A_j], which is einsum(O, A_1, .. (without A_i) .., A_n -> A_i) of dY and the other
// operands, in the letters of Note [Einsum labels] (the ellipsis spelled out). Three cases need more than that to
// stay an Einsum:
// - a letter repeated in A_i (the forward read a diagonal): each later occurrence gets a letter of its own, tied to
//   the first by an identity matrix operand, so the gradient is zero off the diagonal;
// - a letter nothing but A_i holds (the forward summed it): a ones vector of its size brings it in, so the gradient
//   is the same along it;
// - a dim of size 1 that broadcast against a larger one: left out of the result (so summed over) and put back by
//   a Reshape to X_i's shape.

[[noreturn]] void ruleError(const GradientBuilder& b, const std::string& why) {
  fail("gradient of node '{}' ({}): {}", b.node().name, b.node().opType, why);
}

// 1 where the two indices agree, of the gradient's dtype.
Tensor identity(DType dtype, std::int64_t size) {
  Tensor t = Tensor::zeros(dtype, {size, size});
  for (std::int64_t i = 0; i < size; ++i) {
    if (dtype == DType::Float64) {
      t.data<double>()[i * size + i] = 1.0;
    } else {
      t.data<float>()[i * size + i] = 1.0F;
    }
  }
  return t;
}

int ones(GradientBuilder& b, DType dtype, std::int64_t size) {
  Tensor one = Tensor::empty(dtype, {1});
  if (dtype == DType::Float64) {
    *one.data<double>() = 1.0;
  } else {
    *one.data<float>() = 1.0F;
  }
  Attributes attrs;
  attrs.set("value", one);
  return b.emit1("ConstantOfShape", {b.int64s({size})}, std::move(attrs));
}

std::vector<int> einsumGradient(GradientBuilder& b) {
  const std::size_t n = b.node().inputs.size();
  std::vector<int> grads(n, kNoValue);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue)
    return grads;
  const DType dtype = b.meta(dy).dtype;
  if (dtype != DType::Float32 && dtype != DType::Float64)
    ruleError(b, fmt::format("type {} is not supported (float32 and float64 only)", dtypeName(dtype)));
  std::vector<Shape> shapes;
  std::vector<std::size_t> ranks;
  for (std::size_t i = 0; i < n; ++i) {
    shapes.push_back(b.meta(b.input(i)).shape);
    ranks.push_back(shapes.back().size());
  }
  EinsumEquation equation;
  std::map<char, std::int64_t> sizes;
  try {
    equation = parseEinsum(b.node().attrs.getString("equation"), ranks);
    sizes = einsumLetterSizes(equation, shapes);
  } catch (const Error& e) {
    ruleError(b, e.what());
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (!b.needsInputGrad(i))
      continue;
    const std::string& letters = equation.inputs[i];
    const Shape& shape = shapes[i];
    std::vector<int> operands{dy};
    std::vector<std::string> terms{equation.output};
    for (std::size_t j = 0; j < n; ++j) {
      if (j != i) {
        operands.push_back(b.input(j));
        terms.push_back(equation.inputs[j]);
      }
    }
    std::string result;  // the gradient's letters
    std::string placed;  // letters of A_i already in it
    Shape resultShape;
    for (std::size_t d = 0; d < letters.size(); ++d) {
      const char c = letters[d];
      if (shape[d] == 1 && sizes.at(c) != 1)
        continue;  // broadcast
      if (placed.find(c) != std::string::npos) {
        const char fresh = unusedEinsumLetter(equation, result);
        operands.push_back(b.constant(identity(dtype, sizes.at(c))));
        terms.push_back(std::string{c, fresh});
        result.push_back(fresh);
      } else {
        result.push_back(c);
        placed.push_back(c);
      }
      resultShape.push_back(shape[d]);
    }
    std::string provided;
    for (const std::string& term : terms)
      provided += term;
    for (char c : placed) {
      if (provided.find(c) == std::string::npos) {
        operands.push_back(ones(b, dtype, sizes.at(c)));
        terms.push_back(std::string{c});
      }
    }
    std::string text;
    for (std::size_t t = 0; t < terms.size(); ++t)
      text += (t == 0 ? "" : ",") + terms[t];
    Attributes attrs;
    attrs.set("equation", text + "->" + result);
    int grad = b.emit1("Einsum", operands, std::move(attrs));
    if (resultShape != shape)
      grad = b.emit1("Reshape", {grad, b.int64s(shape)});
    grads[i] = grad;
  }
  return grads;
}

}  // namespace

void registerEinsumGradients(GradientRegistry& registry) {
  registry.add("Einsum", einsumGradient);
}

}  // namespace strata::gradients
