#include "max_pool_3x3.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "max_pool_simd.h"
#include "strata/thread_pool.h"

namespace strata::cpu {
namespace {

using namespace pool_simd;

// Copies `count` floats; the last partial vector through masked loads (the source may end there) and a full store
// of `fill` in the lanes past it. Inline vectors: memcpy's calls for rows of 31 floats took a quarter of the time.
inline void copyRow(const float* from, float* to, std::int64_t count, __m256 fill) {
  std::int64_t c = 0;
  for (; c + 8 <= count; c += 8)
    _mm256_storeu_ps(to + c, _mm256_loadu_ps(from + c));
  if (c < count) {
    const __m256i lanes = laneMask(count - c);
    _mm256_storeu_ps(to + c, _mm256_blendv_ps(fill, _mm256_maskload_ps(from + c, lanes), _mm256_castsi256_ps(lanes)));
  }
}

// One plane's staging (Note [3x3 max pooling loop]): X with -inf around it, rows [0, 2 outH + 1) and columns
// [0, stride) in padded coordinates, so that every window, a row's last eight included, reads whole vectors.
struct Staging {
  std::int64_t groups, stride, rows;
  explicit Staging(const MaxPool3x3Shape& s)
      : groups((s.outW + 7) / 8), stride(16 * groups + 16), rows(2 * s.outH + 1) {}

  void stage(const float* plane, const MaxPool3x3Shape& s, float* out) const {
    const __m256 lowest = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    const std::int64_t copied = std::min(s.w, stride - s.padLeft);
    for (std::int64_t r = 0; r < rows; ++r) {
      float* row = out + r * stride;
      for (std::int64_t c = 0; c < stride; c += 8)  // stride is a multiple of 16
        _mm256_storeu_ps(row + c, lowest);
      const std::int64_t source = r - s.padTop;
      if (source >= 0 && source < s.h)
        copyRow(plane + source * s.w, row + s.padLeft, copied, lowest);
    }
  }
};

// Row pass: each window's first maximum along its three columns and which column it is (0, 1 or 2), for eight
// windows starting at `row`.
inline void rowMaximum8(const float* row, __m256& best, __m256i& column) {
  __m256 first, second, third, unused;
  deinterleave(row, 8, first, second);
  deinterleave(row + 2, 8, third, unused);
  best = first;
  column = _mm256_setzero_si256();
  const __m256 secondWins = replacesBest(second, best);
  best = _mm256_blendv_ps(best, second, secondWins);
  column = _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(column), _mm256_castsi256_ps(_mm256_set1_epi32(1)), secondWins));
  const __m256 thirdWins = replacesBest(third, best);
  best = _mm256_blendv_ps(best, third, thirdWins);
  column = _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(column), _mm256_castsi256_ps(_mm256_set1_epi32(2)), thirdWins));
}

// Adds even[i] and then laterEven[i] to p[2 i], odd[i] and then laterOdd[i] to p[2 i + 1], i < 8.
inline void addInterleaved(float* p, __m256 even, __m256 odd, __m256 laterEven, __m256 laterOdd) {
  __m256 first, second, laterFirst, laterSecond;
  interleaved(even, odd, first, second);
  interleaved(laterEven, laterOdd, laterFirst, laterSecond);
  _mm256_storeu_ps(p, _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(p), first), laterFirst));
  _mm256_storeu_ps(p + 8, _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(p + 8), second), laterSecond));
}

// One task's buffers for a plane: its staged copy and the row pass over it (each window's row maxima, and where
// `keepColumns`, their columns), 8 x groups windows a row.
struct RowPass {
  const Staging& staging;
  std::int64_t width;
  std::vector<float> staged, best;
  std::vector<std::int32_t> column;

  RowPass(const Staging& st, bool keepColumns)
      : staging(st),
        width(8 * st.groups),
        staged(static_cast<std::size_t>(st.rows * st.stride)),
        best(static_cast<std::size_t>(st.rows * width)),
        column(keepColumns ? best.size() : 0) {}

  void run(const float* plane, const MaxPool3x3Shape& s) {
    staging.stage(plane, s, staged.data());
    for (std::int64_t r = 0; r < staging.rows; ++r) {
      for (std::int64_t group = 0; group < staging.groups; ++group) {
        __m256 rowBest;
        __m256i rowColumn;
        rowMaximum8(staged.data() + r * staging.stride + 16 * group, rowBest, rowColumn);
        const std::int64_t at = r * width + 8 * group;
        _mm256_storeu_ps(best.data() + at, rowBest);
        if (!column.empty())
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(column.data() + at), rowColumn);
      }
    }
  }
};

inline __m256 equals(__m256i a, int value) {
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(a, _mm256_set1_epi32(value)));
}

std::int64_t grain(const MaxPool3x3Shape& s) {
  return planeGrain(s.h, s.w);
}

}  // namespace

bool isMaxPool3x3Stride2(const WindowGeometry& g, const Shape& x) {
  if (x.size() != 4 || g.kernel.size() != 2)
    return false;
  for (std::size_t i = 0; i < 2; ++i) {
    const bool dilated = !g.dilations.empty() && g.dilations[i] != 1;
    if (g.kernel[i] != 3 || g.strides[i] != 2 || dilated || g.padBegin[i] > 2 || g.output[i] < 1)
      return false;
  }
  return true;
}

MaxPool3x3Shape maxPool3x3Shape(const WindowGeometry& g, const Shape& x) {
  return MaxPool3x3Shape{x[0] * x[1], x[2], x[3], g.output[0], g.output[1], g.padBegin[0], g.padBegin[1]};
}

void maxPool3x3(const float* x, float* y, const MaxPool3x3Shape& s) {
  const Staging staging(s);
  parallelFor(0, s.planes, grain(s), [&](std::int64_t begin, std::int64_t end) {
    RowPass rows(staging, false);
    const std::int64_t rowWidth = rows.width;
    for (std::int64_t plane = begin; plane < end; ++plane) {
      rows.run(x + plane * s.h * s.w, s);
      for (std::int64_t i = 0; i < s.outH; ++i) {
        float* out = y + (plane * s.outH + i) * s.outW;
        const float* top = rows.best.data() + 2 * i * rowWidth;
        for (std::int64_t group = 0; group < staging.groups; ++group) {
          __m256 best = _mm256_loadu_ps(top + 8 * group);
          for (int k = 1; k < 3; ++k) {
            const __m256 candidate = _mm256_loadu_ps(top + k * rowWidth + 8 * group);
            best = _mm256_blendv_ps(best, candidate, replacesBest(candidate, best));
          }
          const std::int64_t count = std::min<std::int64_t>(8, s.outW - 8 * group);
          if (count == 8) {
            _mm256_storeu_ps(out + 8 * group, best);
          } else {
            storePart(out + 8 * group, count, best);
          }
        }
      }
    }
  });
}

void maxPool3x3Grad(const float* dy, const float* x, float* dx, const MaxPool3x3Shape& s,
                    const std::function<void(std::int64_t plane)>& directPlane) {
  const Staging staging(s);
  const std::int64_t rowWidth = 8 * staging.groups;  // RowPass::width
  const __m256 lowest = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const __m256i rotateUp = _mm256_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6);
  parallelFor(0, s.planes, grain(s), [&](std::int64_t begin, std::int64_t end) {
    RowPass rows(staging, true);
    std::vector<float> stagedGrad(static_cast<std::size_t>(staging.rows * staging.stride));
    const std::vector<float>& rowBest = rows.best;
    const std::vector<std::int32_t>& rowColumn = rows.column;
    for (std::int64_t plane = begin; plane < end; ++plane) {
      rows.run(x + plane * s.h * s.w, s);
      std::fill(stagedGrad.begin(), stagedGrad.end(), 0.0f);
      int lowestMaximum = 0;
      for (std::int64_t i = 0; i < s.outH; ++i) {
        const std::int64_t top = 2 * i * rowWidth;
        const float* grad = dy + (plane * s.outH + i) * s.outW;
        __m256 carried[3] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (std::int64_t group = 0; group < staging.groups; ++group) {
          const std::int64_t at = top + 8 * group;
          const std::int64_t count = std::min<std::int64_t>(8, s.outW - 8 * group);
          __m256 best = _mm256_loadu_ps(rowBest.data() + at);
          __m256i column = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rowColumn.data() + at));
          __m256i pickedRow = _mm256_setzero_si256();
          for (int k = 1; k < 3; ++k) {
            const __m256 candidate = _mm256_loadu_ps(rowBest.data() + at + k * rowWidth);
            const __m256 wins = replacesBest(candidate, best);
            const __m256i candidateColumn =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rowColumn.data() + at + k * rowWidth));
            best = _mm256_blendv_ps(best, candidate, wins);
            column = _mm256_castps_si256(
                _mm256_blendv_ps(_mm256_castsi256_ps(column), _mm256_castsi256_ps(candidateColumn), wins));
            pickedRow = _mm256_castps_si256(
                _mm256_blendv_ps(_mm256_castsi256_ps(pickedRow), _mm256_castsi256_ps(_mm256_set1_epi32(k)), wins));
          }
          const __m256 valid = _mm256_castsi256_ps(laneMask(count));
          lowestMaximum |= _mm256_movemask_ps(_mm256_and_ps(valid, _mm256_cmp_ps(best, lowest, _CMP_EQ_OQ)));
          const __m256 g =
              count == 8 ? _mm256_loadu_ps(grad + 8 * group) : _mm256_maskload_ps(grad + 8 * group, laneMask(count));
          for (int k = 0; k < 3; ++k) {
            const __m256 inRow = _mm256_and_ps(g, equals(pickedRow, k));
            // A window's third column is the next window's first: lane j's goes to the even column of lane j + 1,
            // the last lane's to the next group's first. Added before that window's own first column, in the direct
            // loop's order (so the sums round alike); adding it at an offset of two floats instead made every load
            // wait for the store before it to retire.
            const __m256 third = _mm256_permutevar8x32_ps(_mm256_and_ps(inRow, equals(column, 2)), rotateUp);
            float* out = stagedGrad.data() + (2 * i + k) * staging.stride + 16 * group;
            addInterleaved(out, _mm256_blend_ps(third, carried[k], 0x01), _mm256_setzero_ps(),
                           _mm256_and_ps(inRow, equals(column, 0)), _mm256_and_ps(inRow, equals(column, 1)));
            carried[k] = third;
          }
        }
        for (int k = 0; k < 3; ++k)
          stagedGrad[(2 * i + k) * staging.stride + 16 * staging.groups] += _mm256_cvtss_f32(carried[k]);
      }
      if (lowestMaximum != 0) {
        directPlane(plane);
        continue;
      }
      float* out = dx + plane * s.h * s.w;
      const std::int64_t copied = std::min(s.w, staging.stride - s.padLeft);
      for (std::int64_t r = 0; r < s.h; ++r) {
        float* row = out + r * s.w;
        const std::int64_t source = r + s.padTop;
        if (source >= staging.rows) {
          std::fill(row, row + s.w, 0.0f);
          continue;
        }
        const float* from = stagedGrad.data() + source * staging.stride + s.padLeft;
        std::int64_t c = 0;
        for (; c + 8 <= copied; c += 8)
          _mm256_storeu_ps(row + c, _mm256_loadu_ps(from + c));
        for (; c < copied; ++c)  // no masked store: about 10 cycles each on AMD's cores
          row[c] = from[c];
        std::fill(row + copied, row + s.w, 0.0f);
      }
    }
  });
}

}  // namespace strata::cpu
