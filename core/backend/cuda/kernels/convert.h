#pragma once

// The CUDA half of Tensor::convertFrom (DeviceBackend::convert): casts and adds between floating dtypes in device
// memory, so a strategy's 16-bit copies of flat buffers never travel through the host.

#include <cuda_runtime.h>

#include <cstdint>

#include "strata/dtype.h"

namespace strata::cuda {

// dst = src (or dst += src) over `count` device elements, enqueued on `stream`; float arithmetic (double when
// either side is float64) and one rounding to dst's dtype (to nearest even), as convertOnHost does.
void launchConvert(void* dst, DType dstType, const void* src, DType srcType, std::int64_t count, bool accumulate,
                   cudaStream_t stream);

}  // namespace strata::cuda
