#include "max_pool_pairs.h"

#include <algorithm>
#include <cstring>

#include "max_pool_simd.h"
#include "strata/thread_pool.h"

namespace strata::cpu {
namespace {

using namespace pool_simd;

struct Windows8 {
  __m256 best;
  __m256 picked[4];  // all ones in the lanes where a, b, c, d (upper row, then lower) is the pick
};

// Each window's first maximum or first NaN (Note [Pooling backward]): a later value wins when it is greater or a
// NaN, unless the best so far is already a NaN. The windows are columns [0, count) of rows `upper` and `lower`.
inline Windows8 firstMaximum8(const float* upper, const float* lower, std::int64_t count) {
  __m256 v[4];
  deinterleave(upper, count, v[0], v[1]);
  deinterleave(lower, count, v[2], v[3]);
  Windows8 w;
  w.best = v[0];
  w.picked[0] = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (int i = 1; i < 4; ++i) {
    const __m256 wins = replacesBest(v[i], w.best);
    w.best = _mm256_blendv_ps(w.best, v[i], wins);
    for (int k = 0; k < i; ++k)
      w.picked[k] = _mm256_andnot_ps(wins, w.picked[k]);
    w.picked[i] = wins;
  }
  return w;
}

// The same over eight channels of one window's pixels a, b (upper row) and c, d (lower row), channels [0, count).
inline Windows8 firstMaximumOfPixels8(const float* const (&pixel)[4], std::int64_t count) {
  const bool whole = count == 8;
  const __m256i mask = laneMask(count);
  Windows8 w;
  w.best = whole ? _mm256_loadu_ps(pixel[0]) : _mm256_maskload_ps(pixel[0], mask);
  w.picked[0] = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (int i = 1; i < 4; ++i) {
    const __m256 v = whole ? _mm256_loadu_ps(pixel[i]) : _mm256_maskload_ps(pixel[i], mask);
    const __m256 wins = replacesBest(v, w.best);
    w.best = _mm256_blendv_ps(w.best, v, wins);
    for (int k = 0; k < i; ++k)
      w.picked[k] = _mm256_andnot_ps(wins, w.picked[k]);
    w.picked[i] = wins;
  }
  return w;
}

inline void storeLanes(float* p, std::int64_t count, __m256 v) {
  if (count == 8) {
    _mm256_storeu_ps(p, v);
  } else {
    storePart(p, count, v);
  }
}

// Output rows (image, row) per task: at least 16K input elements each.
std::int64_t rowGrain(std::int64_t w, std::int64_t c) {
  return std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, 2 * w * c));
}

}  // namespace

bool isMaxPool2x2(const WindowGeometry& g, const Shape& x) {
  if (x.size() != 4 || g.kernel.size() != 2)
    return false;
  for (std::size_t i = 0; i < 2; ++i) {
    const bool dilated = !g.dilations.empty() && g.dilations[i] != 1;
    if (g.kernel[i] != 2 || g.strides[i] != 2 || g.padBegin[i] != 0 || g.padEnd[i] != 0 || dilated ||
        g.output[i] != x[2 + i] / 2)
      return false;
  }
  return true;
}

void maxPool2x2(const float* x, float* y, std::int64_t planes, std::int64_t h, std::int64_t w) {
  const std::int64_t oh = h / 2, ow = w / 2;
  parallelFor(0, planes, planeGrain(h, w), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      for (std::int64_t i = 0; i < oh; ++i) {
        const float* upper = x + (plane * h + 2 * i) * w;
        const float* lower = upper + w;
        float* out = y + (plane * oh + i) * ow;
        for (std::int64_t j = 0; j < ow; j += 8) {
          const std::int64_t count = std::min<std::int64_t>(8, ow - j);
          const __m256 best = firstMaximum8(upper + 2 * j, lower + 2 * j, count).best;
          if (count == 8) {
            _mm256_storeu_ps(out + j, best);
          } else {
            storePart(out + j, count, best);
          }
        }
      }
    }
  });
}

void maxPool2x2Grad(const float* dy, const float* x, float* dx, std::int64_t planes, std::int64_t h, std::int64_t w) {
  const std::int64_t oh = h / 2, ow = w / 2;
  parallelFor(0, planes, planeGrain(h, w), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      for (std::int64_t i = 0; i < oh; ++i) {
        const std::int64_t row = (plane * h + 2 * i) * w;
        const float* upper = x + row;
        const float* lower = upper + w;
        float* upperOut = dx + row;
        float* lowerOut = upperOut + w;
        const float* grad = dy + (plane * oh + i) * ow;
        for (std::int64_t j = 0; j < ow; j += 8) {
          const std::int64_t count = std::min<std::int64_t>(8, ow - j);
          const Windows8 picks = firstMaximum8(upper + 2 * j, lower + 2 * j, count);
          const __m256 g = count == 8 ? _mm256_loadu_ps(grad + j) : _mm256_maskload_ps(grad + j, laneMask(count));
          interleave(upperOut + 2 * j, count, _mm256_and_ps(picks.picked[0], g), _mm256_and_ps(picks.picked[1], g));
          interleave(lowerOut + 2 * j, count, _mm256_and_ps(picks.picked[2], g), _mm256_and_ps(picks.picked[3], g));
        }
        if (w % 2 != 0) {  // the last column lies in no window
          upperOut[w - 1] = 0.0f;
          lowerOut[w - 1] = 0.0f;
        }
      }
      if (h % 2 != 0)  // so does the last row
        std::memset(dx + (plane * h + h - 1) * w, 0, static_cast<std::size_t>(w) * sizeof(float));
    }
  });
}

void maxPool2x2ChannelsLast(const float* x, float* y, std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c) {
  const std::int64_t oh = h / 2, ow = w / 2;
  parallelFor(0, n * oh, rowGrain(w, c), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      const std::int64_t image = row / oh, i = row % oh;
      const float* upper = x + (image * h + 2 * i) * w * c;
      float* out = y + row * ow * c;
      for (std::int64_t j = 0; j < ow; ++j) {
        const float* a = upper + 2 * j * c;
        for (std::int64_t k = 0; k < c; k += 8) {
          const float* const pixels[4] = {a + k, a + c + k, a + w * c + k, a + (w + 1) * c + k};
          const std::int64_t count = std::min<std::int64_t>(8, c - k);
          storeLanes(out + j * c + k, count, firstMaximumOfPixels8(pixels, count).best);
        }
      }
    }
  });
}

void maxPool2x2GradChannelsLast(const float* dy, const float* x, float* dx, std::int64_t n, std::int64_t h,
                                std::int64_t w, std::int64_t c) {
  const std::int64_t oh = h / 2, ow = w / 2;
  parallelFor(0, n * oh, rowGrain(w, c), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      const std::int64_t image = row / oh, i = row % oh;
      const std::int64_t offset = (image * h + 2 * i) * w * c;
      const float* upper = x + offset;
      float* upperOut = dx + offset;
      const float* grad = dy + row * ow * c;
      for (std::int64_t j = 0; j < ow; ++j) {
        const std::int64_t a = 2 * j * c;
        for (std::int64_t k = 0; k < c; k += 8) {
          const std::int64_t at[4] = {a + k, a + c + k, a + w * c + k, a + (w + 1) * c + k};
          const float* const pixels[4] = {upper + at[0], upper + at[1], upper + at[2], upper + at[3]};
          const std::int64_t count = std::min<std::int64_t>(8, c - k);
          const Windows8 picks = firstMaximumOfPixels8(pixels, count);
          const __m256 g =
              count == 8 ? _mm256_loadu_ps(grad + j * c + k) : _mm256_maskload_ps(grad + j * c + k, laneMask(count));
          for (int p = 0; p < 4; ++p)
            storeLanes(upperOut + at[p], count, _mm256_and_ps(picks.picked[p], g));
        }
      }
      if (w % 2 != 0) {  // the last column lies in no window
        std::fill_n(upperOut + (w - 1) * c, c, 0.0f);
        std::fill_n(upperOut + (2 * w - 1) * c, c, 0.0f);
      }
      if (h % 2 != 0 && i == oh - 1)  // so does the image's last row
        std::fill_n(dx + (image * h + h - 1) * w * c, w * c, 0.0f);
    }
  });
}

}  // namespace strata::cpu
