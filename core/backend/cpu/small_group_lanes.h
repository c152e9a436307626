#pragma once

// Eight channels in a vector as 8 / PerGroup whole groups (Note [Small-group convolutions], Note [Small-group weight
// gradient]): the vector whose lane l holds lane (l / PerGroup) * PerGroup + c of `v`, input c of lane l's group.
// Within 128-bit halves for 2 and 4 channels per group (an immediate shuffle), across them for 8.

#include <immintrin.h>

namespace strata::cpu {

template <int PerGroup>
inline __m256 groupLane(__m256 v, int c) {
  static_assert(PerGroup == 2 || PerGroup == 4 || PerGroup == 8);
  if constexpr (PerGroup == 2) {
    return c == 0 ? _mm256_permute_ps(v, 0xA0) : _mm256_permute_ps(v, 0xF5);
  } else if constexpr (PerGroup == 4) {
    switch (c) {
      case 0:
        return _mm256_permute_ps(v, 0x00);
      case 1:
        return _mm256_permute_ps(v, 0x55);
      case 2:
        return _mm256_permute_ps(v, 0xAA);
      default:
        return _mm256_permute_ps(v, 0xFF);
    }
  } else {
    return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(c));
  }
}

}  // namespace strata::cpu
