#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// Dimensions of a tensor, outermost first. A dimension of -1 is unknown (only before shape specialisation).
using Shape = std::vector<std::int64_t>;

std::int64_t numElements(const Shape& shape);
bool isStatic(const Shape& shape);
std::string shapeToString(const Shape& shape);
// Contiguous row-major strides in elements.
std::vector<std::int64_t> contiguousStrides(const Shape& shape);
// Numpy-style broadcast of two shapes; throws Error naming both shapes when they are incompatible.
Shape broadcastShapes(const Shape& a, const Shape& b);
// Normalises a possibly negative axis against rank; throws Error when out of range.
std::int64_t normalizeAxis(std::int64_t axis, std::int64_t rank);

}  // namespace strata
