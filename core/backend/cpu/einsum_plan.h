#pragma once

// How the CPU evaluates an Einsum (einsum_ops.cpp), decided at plan time from the equation and the shapes.
//
// Note [Einsum as products]: each operand first takes its diagonals (a letter repeated within it: one strided
// copy), drops the dims of size 1 that broadcast, and sums the letters nobody else reads. The operands are then
// contracted left to right, two at a time: the letters both hold and something later reads are batch dims, those
// both hold and nothing later reads are contracted, the rest belong to one side. Each side is permuted (only when it
// must be) into [batch, own, contracted] and [batch, contracted, own], and one batched product gives
// [batch, own A, own B]: a MatMul (oneDNN's GEMM for float32) when something is contracted, an outer product or a
// row-wise dot product loop when the product is degenerate. Of the side orders and which side goes left, the one
// moving the fewest elements is taken, so "bij,bjk->bik" permutes nothing and "bhqd,bhkd->bhqk" one operand. A last
// permute puts the letters in the output's order.

#include <cstdint>
#include <string>
#include <vector>

#include "strata/einsum_equation.h"
#include "strata/shape.h"

namespace strata::cpu::einsum {

enum class StepKind {
  Diagonal,  // a strided view of the input (viewStrides), copied
  Reshape,   // the same elements under another shape (no copy)
  Sum,       // sums `axes` of the input away
  Permute,   // transposes by `perm`
  Product,   // [batch, m, k] x [batch, k, n] -> [batch, m, n]
};

// Values are the operands (0..n-1) followed by each step's result, in order.
struct Step {
  StepKind kind = StepKind::Reshape;
  std::vector<int> inputs;
  Shape shape;                                  // the result's
  std::vector<std::int64_t> viewStrides;        // Diagonal
  std::vector<std::int64_t> axes;               // Sum
  std::vector<std::int64_t> perm;               // Permute
  std::int64_t batch = 1, m = 1, n = 1, k = 1;  // Product
};

struct Plan {
  std::vector<Shape> valueShapes;  // per value
  std::vector<Step> steps;
  int result = 0;  // the value holding the output (in the output's order and shape)
  // The step that computes the result's elements (the ones after it only reshape), or -1 when the result is an
  // operand's own elements.
  int resultStep = -1;
};

Plan makePlan(const EinsumEquation& equation, const std::vector<Shape>& shapes);

// A one-line account of the steps, for `strata run --profile` ("diagonal, sum, matmul 8x64x64x64, permute").
std::string describe(const Plan& plan);

}  // namespace strata::cpu::einsum
