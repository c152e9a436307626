#pragma once

// The products PowerSGD needs, of a matrix with a thin one (r columns, r small): written as dot products and axpys
// over contiguous rows, so the compiler vectorises them (a loop over r innermost does not), accumulated in double.
// A thin matrix is passed transposed (r rows of length cols).

#include <algorithm>
#include <cstdint>
#include <vector>

namespace strata::compression {

// sum over j of a[j] * b[j], in eight lanes (the SLP vectoriser keeps them in vector registers).
template <typename T>
double dot(const T* a, const double* b, std::int64_t n) {
  constexpr std::int64_t kLanes = 8;
  double lanes[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (std::int64_t l = 0; l < kLanes; ++l) {
      lanes[l] += static_cast<double>(a[j + l]) * b[j + l];
    }
  }
  double sum = 0;
  for (; j < n; ++j) {
    sum += static_cast<double>(a[j]) * b[j];
  }
  for (const double lane : lanes) {
    sum += lane;
  }
  return sum;
}

// y[j] += alpha * x[j].
template <typename T>
void axpy(double* y, const T* x, double alpha, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) {
    y[j] += alpha * static_cast<double>(x[j]);
  }
}

// out (rows x r) = m (rows x cols) q, with q given transposed (r x cols).
template <typename T>
void timesThin(const T* m, std::int64_t rows, std::int64_t cols, const double* qTransposed, std::int64_t r,
               double* out) {
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t c = 0; c < r; ++c) {
      out[i * r + c] = dot(m + i * cols, qTransposed + c * cols, cols);
    }
  }
}

// out (r x cols) = (m^T p)^T for m (rows x cols) and p (rows x r): the product transposed.
template <typename T>
void transposedTimesThin(const T* m, std::int64_t rows, std::int64_t cols, const T* p, std::int64_t r,
                         double* outTransposed) {
  std::fill(outTransposed, outTransposed + r * cols, 0.0);
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t c = 0; c < r; ++c) {
      axpy(outTransposed + c * cols, m + i * cols, static_cast<double>(p[i * r + c]), cols);
    }
  }
}

// out (rows x cols) = p (rows x r) q^T, with q given transposed (r x cols).
template <typename T>
void thinTimesThinTransposed(const T* p, const double* qTransposed, std::int64_t rows, std::int64_t cols,
                             std::int64_t r, T* out) {
  std::vector<double> row(static_cast<std::size_t>(cols));
  for (std::int64_t i = 0; i < rows; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (std::int64_t c = 0; c < r; ++c) {
      axpy(row.data(), qTransposed + c * cols, static_cast<double>(p[i * r + c]), cols);
    }
    for (std::int64_t j = 0; j < cols; ++j) {
      out[i * cols + j] = static_cast<T>(row[static_cast<std::size_t>(j)]);
    }
  }
}

}  // namespace strata::compression
