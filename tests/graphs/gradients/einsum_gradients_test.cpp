// Einsum's gradient rule (graphs/src/gradients/einsum_gradients.cpp, Note [Einsum gradient]) against finite
// differences in float64: contractions, diagonals, letters summed away, ellipses, size-1 broadcasting, 1 to 4
// operands.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graphs/gradient_check.h"
#include "strata/attributes.h"
#include "strata/tensor.h"

namespace strata {
namespace einsum_gradients_test {

using testing::expectGradientsMatchFiniteDifferences;
using testing::randomTensor;

void expectMatch(const std::string& equation, const std::vector<Shape>& shapes, unsigned seed) {
  SCOPED_TRACE(equation);
  std::vector<Tensor> inputs;
  for (std::size_t i = 0; i < shapes.size(); ++i)
    inputs.push_back(randomTensor(DType::Float64, shapes[i], seed + static_cast<unsigned>(i)));
  Attributes attrs;
  attrs.set("equation", equation);
  expectGradientsMatchFiniteDifferences("Einsum", inputs, attrs);
}

TEST(EinsumGradientsTest, Contractions) {
  expectMatch("bij,bjk->bik", {{3, 2, 4}, {3, 4, 5}}, 1);
  expectMatch("bhqd,bhkd->bhqk", {{2, 2, 3, 4}, {2, 2, 5, 4}}, 3);
  expectMatch("ij,j->i", {{3, 4}, {4}}, 5);
  expectMatch("i,i", {{5}, {5}}, 7);
  expectMatch("ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 2}}, 9);
  expectMatch("i,j->ij", {{3}, {4}}, 12);
  expectMatch("ab,cd,bd,a->c", {{2, 3}, {4, 5}, {3, 5}, {2}}, 14);
}

TEST(EinsumGradientsTest, UnaryTransposesSumsAndDiagonals) {
  expectMatch("ij->ji", {{3, 4}}, 21);
  expectMatch("ij->i", {{3, 4}}, 22);
  expectMatch("ijk->", {{2, 3, 2}}, 23);
  expectMatch("ii->i", {{4, 4}}, 24);
  expectMatch("ii", {{4, 4}}, 25);
  expectMatch("...ii->...i", {{2, 3, 3}}, 26);
  expectMatch("iji->j", {{3, 2, 3}}, 27);
  expectMatch("iii->i", {{3, 3, 3}}, 28);
}

TEST(EinsumGradientsTest, OperandsWithLettersOfTheirOwn) {
  expectMatch("ij,jk->i", {{3, 4}, {4, 2}}, 31);  // k only in the second operand: summed in the forward
  expectMatch("ij,k->ij", {{3, 4}, {2}}, 33);
  expectMatch("ii,jk->ij", {{3, 3}, {2, 4}}, 35);
}

TEST(EinsumGradientsTest, EllipsisAndSizeOneBroadcasting) {
  expectMatch("...ij,...jk->...ik", {{2, 1, 3, 4}, {3, 4, 2}}, 41);
  expectMatch("ij,ij->ij", {{1, 3}, {2, 3}}, 43);
  expectMatch("...,...->...", {{2, 1}, {1, 3}}, 45);
  expectMatch("i...,i", {{3, 2, 4}, {3}}, 47);
}

TEST(EinsumGradientsTest, Float32) {
  Attributes attrs;
  attrs.set("equation", std::string("bij,bjk->bik"));
  expectGradientsMatchFiniteDifferences(
      "Einsum", {randomTensor(DType::Float32, {2, 3, 4}, 51), randomTensor(DType::Float32, {2, 4, 3}, 52)}, attrs);
}

}  // namespace einsum_gradients_test
}  // namespace strata
