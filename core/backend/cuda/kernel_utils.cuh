#pragma once

// Helpers shared by Strata's own CUDA kernels: launch shapes, broadcasting indexers, dtype dispatch and
// registration of kernels for ops whose schemas the CPU backend already registered.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <type_traits>

#include "cuda_check.h"
#include "cuda_stream.h"
#include "strata/op_registry.h"
#include "strata/shape.h"
#include "strata/tensor.h"

namespace strata::cuda {

// Note [fmt under nvcc]: fmt 9 turns its constexpr off when it sees __NVCC__, and then its compile-time
// format-string checks (strata::fail, STRATA_CHECK) do not compile; CUDA sources are built with
// FMT_USE_CONSTEXPR=1 (see core/backend/cuda/CMakeLists.txt), which nvcc 13 handles.

constexpr int kThreadsPerBlock = 256;
constexpr int kMaxDims = 8;

// Enough blocks for a grid-stride loop over n elements without launching millions of idle blocks.
inline unsigned blocksFor(std::int64_t n, int threads = kThreadsPerBlock) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  constexpr std::int64_t kMaxBlocks = 65535LL * 8;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

#define STRATA_GRID_STRIDE_LOOP(i, n)                                                              \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

// Maps an element of an output of shape `sizes` (row-major linear index) to an element offset of an input whose
// strides are 0 along broadcast axes. Passed to kernels by value.
struct Indexer {
  int rank = 0;
  std::int64_t sizes[kMaxDims] = {};
  std::int64_t strides[kMaxDims] = {};

  __host__ __device__ std::int64_t offset(std::int64_t linear) const {
    std::int64_t result = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const std::int64_t coord = linear % sizes[d];
      linear /= sizes[d];
      result += coord * strides[d];
    }
    return result;
  }
};

// An indexer from `outShape` into an input of shape `inShape` broadcast to it (numpy rules, right-aligned).
// Throws when the rank exceeds kMaxDims.
Indexer broadcastIndexer(const Shape& inShape, const Shape& outShape);
// An indexer that reads a contiguous tensor of `inShape` with its axes permuted by `perm` (output axis d reads
// input axis perm[d]).
Indexer permuteIndexer(const Shape& inShape, const std::vector<std::int64_t>& perm);

// Device arithmetic types for Strata dtypes: Float16 -> __half, BFloat16 -> __nv_bfloat16.
template <typename T>
struct DeviceTypeOf {
  using type = T;
};
template <>
struct DeviceTypeOf<Half> {
  using type = __half;
};
template <>
struct DeviceTypeOf<BFloat16Bits> {
  using type = __nv_bfloat16;
};

// The type kernels accumulate in: float for the 16-bit floats and float, double for double, T for integers.
template <typename T>
struct AccTypeOf {
  using type = T;
};
template <>
struct AccTypeOf<__half> {
  using type = float;
};
template <>
struct AccTypeOf<__nv_bfloat16> {
  using type = float;
};

template <typename T>
__host__ __device__ inline typename AccTypeOf<T>::type toAcc(T v) {
  return static_cast<typename AccTypeOf<T>::type>(v);
}
template <typename T, typename A>
__host__ __device__ inline T fromAcc(A v) {
  return static_cast<T>(v);
}

template <typename T>
inline constexpr bool kIsDeviceFloat = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                       std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// Calls fn with a value of the device type for dtype (float, double, __half, __nv_bfloat16, int64_t, int32_t,
// int8_t, uint8_t, bool).
template <typename Fn>
decltype(auto) visitDeviceDType(DType dtype, Fn&& fn) {
  return visitDType(dtype, [&](auto tag) {
    using T = typename DeviceTypeOf<decltype(tag)>::type;
    return fn(T{});
  });
}

// Calls fn for the floating dtypes only; any other dtype is an error that names the op.
template <typename Fn>
decltype(auto) visitDeviceFloat(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::Float32:
      return fn(float{});
    case DType::Float64:
      return fn(double{});
    case DType::Float16:
      return fn(__half{});
    case DType::BFloat16:
      return fn(__nv_bfloat16{});
    default:
      fail("{} on CUDA supports float32, float64, float16 and bfloat16 only, not {}", op, dtypeName(dtype));
  }
}

// Registers a stateless CUDA kernel for an op whose schema exists (the CPU backend registers schemas).
void addCudaKernel(OpRegistry& registry, const std::string& type, std::function<void(KernelContext&)> compute);
// Registers a CUDA kernel factory (kernels that choose algorithms or build descriptors at plan time).
// `nativeChannelsLast` (layout-aware ops only): the channels_last = 1 nodes the factory's kernels run themselves;
// the others run through transposes (Note [Channels-last]). A predicate that throws counts as false, so such nodes
// fail with the channels-first kernel's own message.
void addCudaKernelFactory(OpRegistry& registry, const std::string& type, KernelFactory factory,
                          std::function<bool(const KernelInit&)> nativeChannelsLast = nullptr);

}  // namespace strata::cuda
