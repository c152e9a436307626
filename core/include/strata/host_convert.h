#pragma once

#include <cstdint>

#include "strata/dtype.h"

namespace strata {

// dst = src (or dst += src) over `count` host elements of floating dtypes: Tensor::convertFrom on the CPU, and the
// host half of DeviceBackend::convert's default. Arithmetic in double when either side is float64, else in float;
// one rounding to the destination's dtype (to nearest even).
void convertOnHost(void* dst, DType dstType, const void* src, DType srcType, std::int64_t count, bool accumulate);

}  // namespace strata
