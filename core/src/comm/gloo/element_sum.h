#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "strata/dtype.h"

namespace strata::detail {

// Note [16-bit reductions]: Float16 and BFloat16 travel as their 16-bit storage types (Half, BFloat16Bits); each
// element is widened to float, added or scaled, and rounded back, so every partial sum of a ring is rounded to 16
// bits, as NCCL's 16-bit reductions are. What a strategy gains is half the bytes on the wire.
inline float widen(Half value) {
  return halfToFloat(value.bits);
}
inline float widen(BFloat16Bits value) {
  return bfloat16ToFloat(value.bits);
}
template <typename T>
T narrow(float value) {
  if constexpr (std::is_same_v<T, Half>) {
    return Half{floatToHalf(value)};
  } else {
    return BFloat16Bits{floatToBFloat16(value)};
  }
}

template <typename T>
constexpr bool kSixteenBit = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16Bits>;

// out[i] = a[i] + b[i] (out may alias a or b).
template <typename T>
void addElements(T* out, const T* a, const T* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (kSixteenBit<T>) {
      out[i] = narrow<T>(widen(a[i]) + widen(b[i]));
    } else {
      out[i] = a[i] + b[i];
    }
  }
}

// data[i] *= factor.
template <typename T>
void scaleElements(T* data, std::int64_t n, double factor) {
  for (std::int64_t i = 0; i < n; ++i) {
    if constexpr (kSixteenBit<T>) {
      data[i] = narrow<T>(widen(data[i]) * static_cast<float>(factor));
    } else {
      data[i] *= static_cast<T>(factor);
    }
  }
}

}  // namespace strata::detail
