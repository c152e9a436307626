#include "convert.h"

#include <type_traits>

#include "kernel_utils.cuh"

namespace strata::cuda {
namespace {

template <typename Out, typename In>
__global__ void convertKernel(Out* out, const In* in, std::int64_t count, bool accumulate) {
  using Compute = std::conditional_t<std::is_same_v<Out, double> || std::is_same_v<In, double>, double, float>;
  STRATA_GRID_STRIDE_LOOP(i, count) {
    Compute value = static_cast<Compute>(toAcc(in[i]));
    if (accumulate) {
      value = static_cast<Compute>(toAcc(out[i])) + value;
    }
    if constexpr (std::is_same_v<Out, __half> || std::is_same_v<Out, __nv_bfloat16>) {
      out[i] = static_cast<Out>(static_cast<float>(value));  // through float, as the host rounds
    } else {
      out[i] = static_cast<Out>(value);
    }
  }
}

}  // namespace

void launchConvert(void* dst, DType dstType, const void* src, DType srcType, std::int64_t count, bool accumulate,
                   cudaStream_t stream) {
  if (count == 0) {
    return;
  }
  visitDeviceFloat(dstType, "convert", [&](auto outTag) {
    visitDeviceFloat(srcType, "convert", [&](auto inTag) {
      using Out = decltype(outTag);
      using In = decltype(inTag);
      convertKernel<Out, In><<<blocksFor(count), kThreadsPerBlock, 0, stream>>>(
          static_cast<Out*>(dst), static_cast<const In*>(src), count, accumulate);
    });
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
