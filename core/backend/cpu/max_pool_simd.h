#pragma once

// AVX2 helpers of Strata's max-pooling loops (Note [2x2 max pooling loop], Note [3x3 max pooling loop]): eight
// windows at a time along a row of plain NCHW data, whose stride-2 window starts are split into even and odd
// elements. The core library is built for x86-64-v3, so AVX2 is on every host; GCC leaves a scalar version of these
// loops scalar (the stride-2 loads).

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <immintrin.h>

namespace strata::cpu::pool_simd {

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

// The 16 floats even[0], odd[0], even[1], odd[1], ... as two vectors.
inline void interleaved(__m256 even, __m256 odd, __m256& first, __m256& second) {
  const __m256 lo = _mm256_unpacklo_ps(even, odd), hi = _mm256_unpackhi_ps(even, odd);
  first = _mm256_permute2f128_ps(lo, hi, 0x20);
  second = _mm256_permute2f128_ps(lo, hi, 0x31);
}

// Stores the first `count` lanes of even and odd interleaved, as 2 * count consecutive floats.
inline void interleave(float* p, std::int64_t count, __m256 even, __m256 odd) {
  __m256 first, second;
  interleaved(even, odd, first, second);
  if (count == 8) {
    _mm256_storeu_ps(p, first);
    _mm256_storeu_ps(p + 8, second);
  } else {
    storePart(p, 2 * count, first, second);
  }
}

// The lanes where `candidate` replaces `best` under the first-maximum-or-first-NaN rule (Note [Pooling backward]):
// it is greater or a NaN, unless the best so far is already a NaN.
inline __m256 replacesBest(__m256 candidate, __m256 best) {
  return _mm256_andnot_ps(_mm256_cmp_ps(candidate, best, _CMP_LE_OQ), _mm256_cmp_ps(best, best, _CMP_EQ_OQ));
}

// Planes per task: at least 16K input elements, so a task outweighs its dispatch.
inline std::int64_t planeGrain(std::int64_t h, std::int64_t w) {
  return std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, h * w));
}

}  // namespace strata::cpu::pool_simd
