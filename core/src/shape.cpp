#include "strata/shape.h"

#include <algorithm>

#include "strata/error.h"

namespace strata {

std::int64_t numElements(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    // Shapes come from model files: a product past 2^63 is refused, not wrapped (undefined behaviour).
    if (__builtin_mul_overflow(n, d, &n)) {
      fail("shape {} has more elements than a 64-bit count holds", shapeToString(shape));
    }
  }
  return n;
}

bool isStatic(const Shape& shape) {
  return std::all_of(shape.begin(), shape.end(), [](std::int64_t d) { return d >= 0; });
}

std::string shapeToString(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) {
      s += ", ";
    }
    s += shape[i] < 0 ? "?" : std::to_string(shape[i]);
  }
  return s + "]";
}

std::vector<std::int64_t> contiguousStrides(const Shape& shape) {
  std::vector<std::int64_t> strides(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;) {
    strides[i - 1] = strides[i] * shape[i];
  }
  return strides;
}

Shape broadcastShapes(const Shape& a, const Shape& b) {
  const std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank, 1);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const std::int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      fail("shapes {} and {} cannot be broadcast together (dimension {}: {} vs {})", shapeToString(a), shapeToString(b),
           i, da, db);
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::int64_t normalizeAxis(std::int64_t axis, std::int64_t rank) {
  if (axis < -rank || axis >= std::max<std::int64_t>(rank, 1)) {
    fail("axis {} is out of range for a tensor of rank {}", axis, rank);
  }
  return axis < 0 ? axis + rank : axis;
}

}  // namespace strata
