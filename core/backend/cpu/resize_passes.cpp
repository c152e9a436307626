#include "resize_passes.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "data_movement_plan.h"
#include "strata/error.h"
#include "strata/thread_pool.h"

namespace strata::cpu::resize {

namespace {

// About this many multiply-adds per parallel task.
constexpr std::int64_t kTaskWork = std::int64_t{1} << 14;

std::int64_t grainFor(std::int64_t workPerItem) {
  return std::max<std::int64_t>(1, kTaskWork / std::max<std::int64_t>(1, workPerItem));
}

// out[r] = sum_{t < taps} w[t * n + r] * in[idx[t * n + r]] for r in [r0, r1): the innermost axis's forward pass
// and (padded) adjoint. float32 takes 8 positions per step with AVX2 gathers (GCC does not vectorise this loop).
template <typename T>
void gatherSum(const T* __restrict__ in, T* __restrict__ out, std::int64_t r0, std::int64_t r1, std::int64_t n,
               const std::int32_t* __restrict__ idx, const T* __restrict__ w, int taps) {
  std::int64_t r = r0;
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (std::is_same_v<T, float>) {
    const auto indices = [&](std::int64_t at) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx + at));
    };
    for (; r + 8 <= r1; r += 8) {
      __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(w + r), _mm256_i32gather_ps(in, indices(r), 4));
      for (int t = 1; t < taps; ++t) {
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + t * n + r), _mm256_i32gather_ps(in, indices(t * n + r), 4), acc);
      }
      _mm256_storeu_ps(out + r, acc);
    }
  }
#endif
  for (; r < r1; ++r) {
    T acc = w[r] * in[idx[r]];
    for (int t = 1; t < taps; ++t)
      acc += w[t * n + r] * in[idx[t * n + r]];
    out[r] = acc;
  }
}

// ---- One slice of a pass: in [inSize, inner] -> out [outSize, inner] ----

// Output rows [r0, r1) of one slice. With inner == 1 (the innermost axis) each output element gathers Taps input
// elements; otherwise each output row is a weighted sum of Taps contiguous input rows, vectorised along the row.
// Taps is a compile-time constant so the tap loops unroll.
template <typename T, int Taps>
void resampleRows(const TypedPass<T>& pass, const T* __restrict__ in, T* __restrict__ out, std::int64_t r0,
                  std::int64_t r1, std::int64_t inner) {
  const std::int64_t n = pass.outSize;
  const std::int32_t* __restrict__ idx = pass.index.data();
  const T* __restrict__ w = pass.weight.data();
  if (inner == 1) {
    gatherSum(in, out, r0, r1, n, idx, w, Taps);
    return;
  }
  for (std::int64_t r = r0; r < r1; ++r) {
    T* dst = out + r * inner;
    const T* s0 = in + static_cast<std::int64_t>(idx[r]) * inner;
    const T w0 = w[r];
    if constexpr (Taps == 1) {
      if (w0 == T(1)) {
        std::memcpy(dst, s0, static_cast<std::size_t>(inner) * sizeof(T));
      } else {
        for (std::int64_t i = 0; i < inner; ++i)
          dst[i] = w0 * s0[i];
      }
    } else if constexpr (Taps == 2) {
      const T* s1 = in + static_cast<std::int64_t>(idx[n + r]) * inner;
      const T w1 = w[n + r];
      for (std::int64_t i = 0; i < inner; ++i)
        dst[i] = w0 * s0[i] + w1 * s1[i];
    } else {
      static_assert(Taps == 4);
      const T* s1 = in + static_cast<std::int64_t>(idx[n + r]) * inner;
      const T* s2 = in + static_cast<std::int64_t>(idx[2 * n + r]) * inner;
      const T* s3 = in + static_cast<std::int64_t>(idx[3 * n + r]) * inner;
      const T w1 = w[n + r], w2 = w[2 * n + r], w3 = w[3 * n + r];
      for (std::int64_t i = 0; i < inner; ++i)
        dst[i] = w0 * s0[i] + w1 * s1[i] + w2 * s2[i] + w3 * s3[i];
    }
  }
}

template <typename T>
void resampleRowsOf(const TypedPass<T>& pass, const T* in, T* out, std::int64_t r0, std::int64_t r1,
                    std::int64_t inner) {
  switch (pass.taps) {
    case 1:
      resampleRows<T, 1>(pass, in, out, r0, r1, inner);
      break;
    case 2:
      resampleRows<T, 2>(pass, in, out, r0, r1, inner);
      break;
    case 4:
      resampleRows<T, 4>(pass, in, out, r0, r1, inner);
      break;
    default:
      break;  // makePlan only makes 1, 2 or 4 taps (checked in forwardPass)
  }
}

// dst = sum_k weight[k] * rows[source[k]] for k in [k0, k1), rows of `length` elements (dst zero when empty).
template <typename T>
void weightedRowSum(T* __restrict__ dst, const T* __restrict__ rows, std::int64_t length, const std::int32_t* source,
                    const T* weight, std::int64_t k0, std::int64_t k1) {
  if (k0 == k1) {
    std::fill(dst, dst + length, T(0));
    return;
  }
  const T* s0 = rows + static_cast<std::int64_t>(source[k0]) * length;
  const T w0 = weight[k0];
  for (std::int64_t i = 0; i < length; ++i)
    dst[i] = w0 * s0[i];
  for (std::int64_t k = k0 + 1; k < k1; ++k) {
    const T* s = rows + static_cast<std::int64_t>(source[k]) * length;
    const T wk = weight[k];
    for (std::int64_t i = 0; i < length; ++i)
      dst[i] += wk * s[i];
  }
}

// Input rows [j0, j1) of one slice of the adjoint: in [outSize, inner] -> out [inSize, inner].
template <typename T>
void adjointRows(const TypedPass<T>& pass, const T* __restrict__ in, T* __restrict__ out, std::int64_t j0,
                 std::int64_t j1, std::int64_t inner) {
  const std::int64_t* first = pass.adjoint.first.data();
  const std::int32_t* __restrict__ source = pass.adjoint.source.data();
  const T* __restrict__ w = pass.adjointWeight.data();
  if (inner == 1 && pass.adjointTaps > 0) {
    gatherSum(in, out, j0, j1, pass.inSize, pass.adjointIndex.data(), pass.adjointFixedWeight.data(), pass.adjointTaps);
    return;
  }
  if (inner == 1) {
    for (std::int64_t j = j0; j < j1; ++j) {
      T acc = T(0);
      for (std::int64_t k = first[j]; k < first[j + 1]; ++k)
        acc += w[k] * in[source[k]];
      out[j] = acc;
    }
    return;
  }
  for (std::int64_t j = j0; j < j1; ++j)
    weightedRowSum(out + j * inner, in, inner, source, w, first[j], first[j + 1]);
}

}  // namespace

template <typename T>
TypedPass<T> typedPass(const AxisTaps& taps, bool withAdjoint) {
  TypedPass<T> pass;
  pass.axis = taps.axis;
  pass.inSize = taps.inSize;
  pass.outSize = taps.outSize;
  pass.taps = taps.taps;
  pass.index = taps.index;
  pass.weight.assign(taps.weight.begin(), taps.weight.end());
  pass.extrapolated = taps.extrapolated;
  if (withAdjoint) {
    pass.adjoint = adjointOf(taps);
    pass.adjointWeight.assign(pass.adjoint.weight.begin(), pass.adjoint.weight.end());
    const auto m = static_cast<std::size_t>(taps.inSize);
    std::int64_t longest = 0;
    for (std::size_t j = 0; j < m; ++j)
      longest = std::max(longest, pass.adjoint.first[j + 1] - pass.adjoint.first[j]);
    if (longest <= kMaxAdjointTaps) {
      // Padding reads position 0 with weight 0 (in range, adds nothing); entries keep their order.
      pass.adjointTaps = static_cast<int>(std::max<std::int64_t>(longest, 1));
      pass.adjointIndex.assign(static_cast<std::size_t>(pass.adjointTaps) * m, 0);
      pass.adjointFixedWeight.assign(pass.adjointIndex.size(), T(0));
      for (std::size_t j = 0; j < m; ++j) {
        for (std::int64_t k = pass.adjoint.first[j]; k < pass.adjoint.first[j + 1]; ++k) {
          const auto slot = static_cast<std::size_t>(k - pass.adjoint.first[j]) * m + j;
          pass.adjointIndex[slot] = pass.adjoint.source[static_cast<std::size_t>(k)];
          pass.adjointFixedWeight[slot] = pass.adjointWeight[static_cast<std::size_t>(k)];
        }
      }
    }
  }
  return pass;
}

template <typename T>
void forwardPass(const TypedPass<T>& pass, const T* src, T* dst, std::int64_t outer, std::int64_t inner) {
  if (outer == 0 || inner == 0 || pass.outSize == 0)
    return;
  STRATA_CHECK(pass.taps == 1 || pass.taps == 2 || pass.taps == 4, "Resize: {} taps per output position", pass.taps);
  const std::int64_t n = pass.outSize;
  const std::int64_t m = pass.inSize;
  if (inner == 1) {  // whole slices per task
    parallelFor(0, outer, grainFor(n * pass.taps), [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t o = begin; o < end; ++o)
        resampleRowsOf(pass, src + o * m, dst + o * n, 0, n, 1);
    });
    return;
  }
  parallelFor(0, outer * n, grainFor(inner * pass.taps), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      const std::int64_t o = row / n;
      const std::int64_t r = row % n;
      resampleRowsOf(pass, src + o * m * inner, dst + o * n * inner, r, r + 1, inner);
    }
  });
}

template <typename T>
void adjointPass(const TypedPass<T>& pass, const T* src, T* dst, std::int64_t outer, std::int64_t inner) {
  if (outer == 0 || inner == 0 || pass.inSize == 0)
    return;
  const std::int64_t n = pass.outSize;
  const std::int64_t m = pass.inSize;
  STRATA_CHECK(pass.adjoint.first.size() == static_cast<std::size_t>(m) + 1,
               "ResizeGrad: the adjoint tables are missing");
  // Reads per input position, on average: the task size.
  const std::int64_t perPosition = std::max<std::int64_t>(1, (n * pass.taps + m - 1) / m);
  if (inner == 1) {
    parallelFor(0, outer, grainFor(m * perPosition), [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t o = begin; o < end; ++o)
        adjointRows(pass, src + o * n, dst + o * m, 0, m, 1);
    });
    return;
  }
  parallelFor(0, outer * m, grainFor(inner * perPosition), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      const std::int64_t o = row / m;
      const std::int64_t j = row % m;
      adjointRows(pass, src + o * n * inner, dst + o * m * inner, j, j + 1, inner);
    }
  });
}

template <typename T>
void fusedForward(const TypedPass<T>& a, const TypedPass<T>& b, const T* src, T* dst, std::int64_t outer,
                  std::int64_t mid, std::int64_t inner) {
  const std::int64_t sliceIn = b.inSize * inner;    // one (a, mid) position's input slice
  const std::int64_t sliceOut = b.outSize * inner;  // and output slice
  const std::int64_t slabIn = mid * sliceIn;        // one input row of axis a
  const std::int64_t slabOut = mid * sliceOut;
  if (outer == 0 || a.outSize == 0 || slabOut == 0)
    return;
  STRATA_CHECK(a.taps == 1 || a.taps == 2 || a.taps == 4, "Resize: {} taps per output position", a.taps);
  const std::int64_t work = a.taps * slabIn + b.taps * slabOut;
  parallelFor(0, outer * a.outSize, grainFor(work), [&](std::int64_t begin, std::int64_t end) {
    std::vector<T> blended(static_cast<std::size_t>(slabIn));
    const std::int64_t n = a.outSize;
    for (std::int64_t row = begin; row < end; ++row) {
      const std::int64_t o = row / n;
      const std::int64_t r = row % n;
      const T* base = src + o * a.inSize * slabIn;
      // Along a first (whole input rows of b, vectorised), nearest's single unit tap read in place.
      const T* rows = base + static_cast<std::int64_t>(a.index[static_cast<std::size_t>(r)]) * slabIn;
      if (a.taps != 1 || a.weight[static_cast<std::size_t>(r)] != T(1)) {
        // The taps of output row r as a compressed list: index[t * n + r], weight[t * n + r] for t < taps.
        std::int32_t source[4];
        T weight[4];
        for (int t = 0; t < a.taps; ++t) {
          source[t] = a.index[static_cast<std::size_t>(t * n + r)];
          weight[t] = a.weight[static_cast<std::size_t>(t * n + r)];
        }
        weightedRowSum(blended.data(), base, slabIn, source, weight, 0, a.taps);
        rows = blended.data();
      }
      T* out = dst + row * slabOut;
      for (std::int64_t k = 0; k < mid; ++k)
        resampleRowsOf(b, rows + k * sliceIn, out + k * sliceOut, 0, b.outSize, inner);
    }
  });
}

template <typename T>
void fusedAdjoint(const TypedPass<T>& a, const TypedPass<T>& b, const T* src, T* dst, std::int64_t outer,
                  std::int64_t mid, std::int64_t inner) {
  const std::int64_t sliceIn = b.inSize * inner;
  const std::int64_t sliceOut = b.outSize * inner;
  const std::int64_t slabIn = mid * sliceIn;
  const std::int64_t slabOut = mid * sliceOut;
  if (outer == 0 || a.inSize == 0 || slabIn == 0)
    return;
  STRATA_CHECK(a.adjoint.first.size() == static_cast<std::size_t>(a.inSize) + 1 &&
                   b.adjoint.first.size() == static_cast<std::size_t>(b.inSize) + 1,
               "ResizeGrad: the adjoint tables are missing");
  const std::int64_t m = a.inSize;
  const std::int64_t perRow = std::max<std::int64_t>(1, (a.outSize * a.taps + m - 1) / m);
  parallelFor(0, outer * m, grainFor(perRow * slabOut + b.taps * slabOut), [&](std::int64_t begin, std::int64_t end) {
    std::vector<T> blended(static_cast<std::size_t>(slabOut));
    for (std::int64_t row = begin; row < end; ++row) {
      const std::int64_t o = row / m;
      const std::int64_t j = row % m;
      // The transpose of a first: the output rows that read input row j, weighted (whole rows, vectorised).
      weightedRowSum(blended.data(), src + o * a.outSize * slabOut, slabOut, a.adjoint.source.data(),
                     a.adjointWeight.data(), a.adjoint.first[static_cast<std::size_t>(j)],
                     a.adjoint.first[static_cast<std::size_t>(j) + 1]);
      T* out = dst + row * slabIn;
      for (std::int64_t k = 0; k < mid; ++k)
        adjointRows(b, blended.data() + k * sliceOut, out + k * sliceIn, 0, b.inSize, inner);
    }
  });
}

template <typename T>
void fillExtrapolated(const TypedPass<T>& pass, T* dst, const Shape& shape, T value) {
  if (pass.extrapolated.empty())
    return;
  const auto axis = static_cast<std::size_t>(pass.axis);
  const std::int64_t outer = shape_detail::productOf(shape, 0, axis);
  const std::int64_t inner = shape_detail::productOf(shape, axis + 1, shape.size());
  for (std::int64_t o = 0; o < outer; ++o) {
    for (const std::int64_t r : pass.extrapolated) {
      T* row = dst + (o * shape[axis] + r) * inner;
      std::fill(row, row + inner, value);
    }
  }
}

#define STRATA_RESIZE_PASSES(T)                                                                                     \
  template TypedPass<T> typedPass<T>(const AxisTaps&, bool);                                                        \
  template void forwardPass<T>(const TypedPass<T>&, const T*, T*, std::int64_t, std::int64_t);                      \
  template void adjointPass<T>(const TypedPass<T>&, const T*, T*, std::int64_t, std::int64_t);                      \
  template void fusedForward<T>(const TypedPass<T>&, const TypedPass<T>&, const T*, T*, std::int64_t, std::int64_t, \
                                std::int64_t);                                                                      \
  template void fusedAdjoint<T>(const TypedPass<T>&, const TypedPass<T>&, const T*, T*, std::int64_t, std::int64_t, \
                                std::int64_t);                                                                      \
  template void fillExtrapolated<T>(const TypedPass<T>&, T*, const Shape&, T);

STRATA_RESIZE_PASSES(float)
STRATA_RESIZE_PASSES(double)

#undef STRATA_RESIZE_PASSES

}  // namespace strata::cpu::resize
