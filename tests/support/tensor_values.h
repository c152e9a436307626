#pragma once

// A host tensor from values, for the unit tests (it was copied into five test files).

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "strata/tensor.h"

namespace strata {

// A tensor of `shape` holding `values` in order; a count that does not match the shape fails the test.
template <typename T>
Tensor makeTensor(Shape shape, const std::vector<T>& values) {
  Tensor t = Tensor::empty(dtypeOf<T>(), std::move(shape));
  EXPECT_EQ(t.numel(), static_cast<std::int64_t>(values.size()));
  T* data = t.data<T>();
  for (std::int64_t i = 0; i < t.numel() && i < static_cast<std::int64_t>(values.size()); ++i) {
    data[i] = values[static_cast<std::size_t>(i)];  // element by element: std::vector<bool> has no data()
  }
  return t;
}

}  // namespace strata
