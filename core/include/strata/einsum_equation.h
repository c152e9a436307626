#pragma once

// Einsum's equation with every dim labelled, shared by the CPU kernel (core/backend/cpu/einsum_*.cpp) and the
// gradient rule (graphs/src/gradients/einsum_gradients.cpp).
//
// Note [Einsum labels]: an equation such as "...ij,...jk->...ik" or "ij,jk" is parsed against the operands' ranks
// into one letter per dim: whitespace is ignored, the ellipsis's dims get letters the equation does not use (the
// same letters in every operand, right-aligned as numpy broadcasts them), and an implicit output is the ellipsis's
// dims followed by the letters that appear once, in ASCII order (numpy's rule: upper case first). A letter repeated
// within an operand takes its diagonal; a letter missing from the output is summed over; a dim of size 1 broadcasts
// against the same letter's other sizes.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "strata/shape.h"

namespace strata {

struct EinsumEquation {
  std::vector<std::string> inputs;  // per operand, one letter per dim
  std::string output;
  std::string ellipsis;  // the letters of the ellipsis's dims, outermost first (empty when it has none)
};

// Fails (naming the equation and the reason) when the equation is malformed or does not fit the ranks.
EinsumEquation parseEinsum(std::string_view equation, const std::vector<std::size_t>& ranks);

// "ij,jk->ik": the explicit form (ellipsis dims as their letters), which parses back to the same labels.
std::string einsumString(const EinsumEquation& equation);

// Each letter's size: its size in the operands, where 1 broadcasts; fails when two sizes of a letter differ
// otherwise, or a repeated letter's dims within one operand differ.
std::map<char, std::int64_t> einsumLetterSizes(const EinsumEquation& equation, const std::vector<Shape>& shapes);

Shape einsumOutputShape(const EinsumEquation& equation, const std::vector<Shape>& shapes);

// A letter the equation does not use (an error when all 52 are used).
char unusedEinsumLetter(const EinsumEquation& equation, std::string_view alsoTaken = {});

}  // namespace strata
