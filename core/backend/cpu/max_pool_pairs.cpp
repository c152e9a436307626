#include "max_pool_pairs.h"

#include <algorithm>
#include <cstring>

#include <immintrin.h>

#include "strata/thread_pool.h"

namespace strata::cpu {
namespace {

// Eight windows at a time (the core library is built for x86-64-v3: AVX2 on every host); a row's last windows are
// masked loads and stores, since small maps (7 windows a row on a 14x14 map) would otherwise run mostly scalar.
// GCC leaves a scalar version of these loops scalar (the stride-2 loads).
struct Windows8 {
  __m256 best;
  __m256 picked[4];  // all ones in the lanes where a, b, c, d (upper row, then lower) is the pick
};

// Lanes [0, count) of eight, all ones; count is clamped to [0, 8].
inline __m256i laneMask(std::int64_t count) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<std::int64_t>(count, 0, 8))), lanes);
}

// The even and odd elements of the first 2 * count of 16 consecutive floats (count <= 8; lanes past it are zero).
inline void deinterleave(const float* p, std::int64_t count, __m256& even, __m256& odd) {
  __m256 lo, hi;
  if (count == 8) {
    lo = _mm256_loadu_ps(p);
    hi = _mm256_loadu_ps(p + 8);
  } else {
    lo = _mm256_maskload_ps(p, laneMask(2 * count));
    hi = _mm256_maskload_ps(p + 8, laneMask(2 * count - 8));
  }
  const auto gather = [](__m256 shuffled) {
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(shuffled), _MM_SHUFFLE(3, 1, 2, 0)));
  };
  even = gather(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)));
  odd = gather(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Stores the first `count` (< 16) floats of lo, hi. Through a copy, not masked stores: those cost about 10 cycles
// each on AMD's cores, and on 14x14 maps every row ends in them.
inline void storePart(float* p, std::int64_t count, __m256 lo, __m256 hi = _mm256_setzero_ps()) {
  alignas(32) float staged[16];
  _mm256_store_ps(staged, lo);
  _mm256_store_ps(staged + 8, hi);
  std::memcpy(p, staged, static_cast<std::size_t>(count) * sizeof(float));
}

// Stores the first `count` lanes of even and odd interleaved, as 2 * count consecutive floats.
inline void interleave(float* p, std::int64_t count, __m256 even, __m256 odd) {
  const __m256 lo = _mm256_unpacklo_ps(even, odd), hi = _mm256_unpackhi_ps(even, odd);
  const __m256 first = _mm256_permute2f128_ps(lo, hi, 0x20), second = _mm256_permute2f128_ps(lo, hi, 0x31);
  if (count == 8) {
    _mm256_storeu_ps(p, first);
    _mm256_storeu_ps(p + 8, second);
  } else {
    storePart(p, 2 * count, first, second);
  }
}

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
    const __m256 wins =
        _mm256_andnot_ps(_mm256_cmp_ps(v[i], w.best, _CMP_LE_OQ), _mm256_cmp_ps(w.best, w.best, _CMP_EQ_OQ));
    w.best = _mm256_blendv_ps(w.best, v[i], wins);
    for (int k = 0; k < i; ++k)
      w.picked[k] = _mm256_andnot_ps(wins, w.picked[k]);
    w.picked[i] = wins;
  }
  return w;
}

// Planes per task: at least 16K input elements, so a task outweighs its dispatch.
std::int64_t planeGrain(std::int64_t h, std::int64_t w) {
  return std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, h * w));
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

}  // namespace strata::cpu
