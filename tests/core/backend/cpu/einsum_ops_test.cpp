// Unit tests for Einsum: the equation parser (strata/einsum_equation.h), the CPU plan (einsum_plan.cpp: which steps
// a contraction takes) and the kernel (einsum_ops.cpp) against a direct sum over every letter's values.

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "strata/einsum_equation.h"
#include "strata/error.h"
#include "strata/op_registry.h"
#include "strata/tensor.h"

namespace strata {
namespace einsum_ops_test {

Tensor randomDoubles(const Shape& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  Tensor t = Tensor::empty(DType::Float64, shape);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<double>()[i] = dist(rng);
  return t;
}

Tensor toFloat(const Tensor& t) {
  Tensor out = Tensor::empty(DType::Float32, t.shape());
  for (std::int64_t i = 0; i < t.numel(); ++i)
    out.data<float>()[i] = static_cast<float>(t.data<double>()[i]);
  return out;
}

Attributes equationAttr(const std::string& equation) {
  Attributes a;
  a.set("equation", equation);
  return a;
}

std::vector<const Tensor*> pointers(const std::vector<Tensor>& inputs) {
  std::vector<const Tensor*> p;
  for (const Tensor& t : inputs)
    p.push_back(&t);
  return p;
}

Tensor einsum(const std::string& equation, const std::vector<Tensor>& inputs) {
  return runOpEagerly("Einsum", pointers(inputs), equationAttr(equation)).at(0);
}

// Sums prod_i X_i over every combination of letter values, into the output letters' element.
Tensor reference(const std::string& text, const std::vector<Tensor>& inputs) {
  std::vector<std::size_t> ranks;
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) {
    ranks.push_back(t.shape().size());
    shapes.push_back(t.shape());
  }
  const EinsumEquation eq = parseEinsum(text, ranks);
  const std::map<char, std::int64_t> sizes = einsumLetterSizes(eq, shapes);
  std::vector<char> letters;
  for (const auto& [c, size] : sizes)
    letters.push_back(c);
  Tensor out = Tensor::zeros(DType::Float64, einsumOutputShape(eq, shapes));
  std::map<char, std::int64_t> value;
  std::int64_t combinations = 1;
  for (char c : letters)
    combinations *= sizes.at(c);
  for (std::int64_t flat = 0; flat < combinations; ++flat) {
    std::int64_t rest = flat;
    for (auto it = letters.rbegin(); it != letters.rend(); ++it) {
      value[*it] = rest % sizes.at(*it);
      rest /= sizes.at(*it);
    }
    double product = 1;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      std::int64_t offset = 0;
      for (std::size_t d = 0; d < shapes[i].size(); ++d)
        offset = offset * shapes[i][d] + (shapes[i][d] == 1 ? 0 : value[eq.inputs[i][d]]);
      product *= inputs[i].data<double>()[offset];
    }
    std::int64_t at = 0;
    for (char c : eq.output)
      at = at * sizes.at(c) + value[c];
    out.data<double>()[at] += product;
  }
  return out;
}

void expectMatches(const std::string& equation, const std::vector<Shape>& shapes, unsigned seed) {
  SCOPED_TRACE(equation);
  std::vector<Tensor> inputs, inputs32;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    inputs.push_back(randomDoubles(shapes[i], seed + static_cast<unsigned>(i)));
    inputs32.push_back(toFloat(inputs.back()));
  }
  const Tensor want = reference(equation, inputs);
  const Tensor got = einsum(equation, inputs);
  const Tensor got32 = einsum(equation, inputs32);
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got32.dtype(), DType::Float32);
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    ASSERT_NEAR(got.data<double>()[i], want.data<double>()[i], 1e-12) << "float64 at " << i;
    ASSERT_NEAR(got32.data<float>()[i], want.data<double>()[i], 1e-4) << "float32 at " << i;
  }
}

std::string planOf(const std::string& equation, const std::vector<Shape>& shapes) {
  std::vector<InputInfo> infos;
  for (const Shape& s : shapes)
    infos.push_back(InputInfo{true, TensorMeta{DType::Float32, s}});
  const Attributes attrs = equationAttr(equation);
  const std::string node = "node";
  const std::vector<TensorMeta> out =
      OpRegistry::instance().schema("Einsum")->inferShapes(ShapeContext{infos, attrs, 1, node, "Einsum"});
  return (*OpRegistry::instance().kernel("Einsum", DeviceType::CPU))(KernelInit{infos, out, attrs, node})
      ->implementation();
}

TEST(EinsumEquationTest, ParsesImplicitOutputsEllipsesAndWhitespace) {
  EinsumEquation eq = parseEinsum("ij,jk", {2, 2});
  EXPECT_EQ(eq.inputs, (std::vector<std::string>{"ij", "jk"}));
  EXPECT_EQ(eq.output, "ik");
  eq = parseEinsum("Ba,bA", {2, 2});
  EXPECT_EQ(eq.output, "ABab") << "numpy's order: upper case first";
  eq = parseEinsum("ii", {2});
  EXPECT_EQ(eq.output, "") << "a repeated letter is summed in implicit mode";
  eq = parseEinsum(" ...ii ->...i", {3});
  EXPECT_EQ(eq.ellipsis, "A");
  EXPECT_EQ(eq.inputs[0], "Aii");
  EXPECT_EQ(eq.output, "Ai");
  eq = parseEinsum("...ij,j...->i...", {4, 2});
  EXPECT_EQ(eq.ellipsis, "AB");
  EXPECT_EQ(eq.inputs, (std::vector<std::string>{"ABij", "jB"})) << "right-aligned";
  EXPECT_EQ(eq.output, "iAB");
  eq = parseEinsum("bij, bjk -> bik", {3, 3});
  EXPECT_EQ(einsumString(eq), "bij,bjk->bik");
  eq = parseEinsum("i,->i", {1, 0});
  EXPECT_EQ(eq.inputs[1], "");
}

TEST(EinsumEquationTest, MalformedEquationsAreClearErrors) {
  const auto expectError = [](const std::string& equation, const std::vector<std::size_t>& ranks,
                              const std::string& fragment) {
    try {
      parseEinsum(equation, ranks);
      ADD_FAILURE() << equation << ": expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expectError("ij,jk->ik", {2}, "has 2 operand terms but the node has 1 input");
  expectError("ij->ij", {3}, "operand 0 has rank 3 but its term 'ij' labels 2 dims");
  expectError("i1->i", {2}, "the character '1'");
  expectError("i..j->i", {2}, "not one ellipsis");
  expectError("ij->ii", {2}, "the output repeats 'i'");
  expectError("ij->k", {2}, "the output's 'k' is in no operand");
  expectError("...i->i", {3}, "the output has no '...'");
  try {
    einsumLetterSizes(parseEinsum("ij,jk", {2, 2}), {{2, 3}, {4, 5}});
    ADD_FAILURE() << "expected a size mismatch";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'j' has size 4 in operand 1"), std::string::npos) << e.what();
  }
}

TEST(EinsumOpsTest, OnnxNodeSuiteEquations) {
  expectMatches("ij->ji", {{3, 4}}, 1);
  expectMatches("ij->i", {{3, 4}}, 2);
  expectMatches("...ii ->...i", {{3, 5, 5}}, 3);
  expectMatches("i,i", {{5}, {5}}, 4);
  expectMatches("bij, bjk -> bik", {{5, 2, 3}, {5, 3, 4}}, 5);
}

TEST(EinsumOpsTest, ContractionsAndTheirShapes) {
  expectMatches("bhqd,bhkd->bhqk", {{2, 3, 5, 4}, {2, 3, 6, 4}}, 11);
  expectMatches("bhqk,bhkd->bhqd", {{2, 3, 5, 6}, {2, 3, 6, 4}}, 12);
  expectMatches("ij,j->i", {{4, 7}, {7}}, 13);
  expectMatches("ij,jk,kl->il", {{3, 4}, {4, 5}, {5, 2}}, 14);
  expectMatches("i,j->ij", {{3}, {4}}, 15);
  expectMatches("bi,bi->b", {{6, 5}, {6, 5}}, 16);
  expectMatches("ij,ij->ij", {{3, 4}, {3, 4}}, 17);
  expectMatches("ijk,ikl->jl", {{2, 3, 4}, {2, 4, 5}}, 18);
  expectMatches("kj,ji", {{3, 4}, {4, 2}}, 19);  // implicit output "ik"
  expectMatches("ab,cd,bd->ac", {{2, 3}, {4, 5}, {3, 5}}, 20);
  expectMatches("i,i,i->", {{4}, {4}, {4}}, 21);
}

TEST(EinsumOpsTest, DiagonalsSumsAndScalars) {
  expectMatches("ii->", {{4, 4}}, 31);
  expectMatches("ii->i", {{4, 4}}, 32);
  expectMatches("iij->j", {{3, 3, 2}}, 33);
  expectMatches("ijk->", {{2, 3, 4}}, 34);
  expectMatches("iji->j", {{3, 2, 3}}, 35);
  expectMatches("ii,jj->ij", {{3, 3}, {2, 2}}, 36);
  expectMatches("i,->i", {{3}, {}}, 37);
  expectMatches("->", {{}}, 38);
  expectMatches("ij->ij", {{2, 3}}, 39);
}

TEST(EinsumOpsTest, EllipsisAndSizeOneBroadcasting) {
  expectMatches("...ij,...jk->...ik", {{2, 1, 3, 4}, {5, 4, 2}}, 41);
  expectMatches("...i,i", {{2, 3}, {3}}, 42);
  expectMatches("i...,i", {{3, 2, 4}, {3}}, 43);
  expectMatches("ij,ij->ij", {{1, 3}, {2, 3}}, 44);
  expectMatches("...,...->...", {{2, 1}, {1, 3}}, 45);
}

TEST(EinsumOpsTest, EmptyDims) {
  expectMatches("ij,jk->ik", {{2, 0}, {0, 3}}, 51);
  expectMatches("ij,jk->ik", {{0, 2}, {2, 3}}, 52);
}

// Note [Einsum as products]: the common contractions are one GEMM, with as few permutes as the layout allows.
TEST(EinsumOpsTest, CommonContractionsAreOneMatmul) {
  EXPECT_EQ(planOf("bij,bjk->bik", {{5, 2, 3}, {5, 3, 4}}), "matmul 5x2x3x4");
  EXPECT_EQ(planOf("bhqd,bhkd->bhqk", {{2, 8, 64, 32}, {2, 8, 64, 32}}), "permute, matmul 16x64x32x64");
  EXPECT_EQ(planOf("bhqk,bhkd->bhqd", {{2, 8, 64, 64}, {2, 8, 64, 32}}), "matmul 16x64x64x32");
  EXPECT_EQ(planOf("ij,j->i", {{4, 7}, {7}}), "matmul 1x4x7x1");
  EXPECT_EQ(planOf("ij,jk->ik", {{4, 7}, {7, 3}}), "matmul 1x4x7x3");
  EXPECT_EQ(planOf("ij,kj->ik", {{4, 7}, {3, 7}}), "permute, matmul 1x4x7x3");
  EXPECT_EQ(planOf("ji,jk->ik", {{7, 4}, {7, 3}}), "permute, matmul 1x4x7x3");
  EXPECT_EQ(planOf("bi,bi->b", {{6, 5}, {6, 5}}), "dot products 6x5");
  EXPECT_EQ(planOf("i,j->ij", {{3}, {4}}), "outer product 1x3x4");
  EXPECT_EQ(planOf("ij->ij", {{3, 4}}), "copy");
  EXPECT_EQ(planOf("ii->i", {{3, 3}}), "diagonal");
  EXPECT_EQ(planOf("ij->i", {{3, 3}}), "sum");
}

TEST(EinsumOpsTest, ShapeErrorsNameTheNode) {
  const Tensor a = randomDoubles({2, 3}, 61);
  const Tensor b = randomDoubles({4, 5}, 62);
  try {
    runOpEagerly("Einsum", {&a, &b}, equationAttr("ij,jk->ik"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 'eager Einsum' (Einsum)"), std::string::npos) << e.what();
  }
  const Tensor i = Tensor::zeros(DType::Int64, {2});
  try {
    runOpEagerly("Einsum", {&i}, equationAttr("i->i"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("type int64 is not supported"), std::string::npos) << e.what();
  }
}

}  // namespace einsum_ops_test
}  // namespace strata
