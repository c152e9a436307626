// The spatial pad / crop copy that lets cuDNN's symmetric-padding convolutions run ONNX's asymmetric pads
// (cudnn_conv.cpp).

#include "nn_kernels.h"

namespace strata::cuda::nn {
namespace {

template <typename T>
__global__ void windowCopyKernel(const T* in, T* out, std::int64_t total, Spatial3 inSize, Spatial3 outSize,
                                 Spatial3 offset) {
  const std::int64_t inVolume = inSize.d[0] * inSize.d[1] * inSize.d[2];
  const std::int64_t outVolume = outSize.d[0] * outSize.d[1] * outSize.d[2];
  STRATA_GRID_STRIDE_LOOP(i, total) {
    const std::int64_t plane = i / outVolume;
    std::int64_t rest = i - plane * outVolume;
    const std::int64_t o2 = rest % outSize.d[2];
    rest /= outSize.d[2];
    const std::int64_t o1 = rest % outSize.d[1];
    const std::int64_t o0 = rest / outSize.d[1];
    const std::int64_t i0 = o0 + offset.d[0], i1 = o1 + offset.d[1], i2 = o2 + offset.d[2];
    const bool inside = i0 >= 0 && i0 < inSize.d[0] && i1 >= 0 && i1 < inSize.d[1] && i2 >= 0 && i2 < inSize.d[2];
    out[i] = inside ? in[plane * inVolume + (i0 * inSize.d[1] + i1) * inSize.d[2] + i2] : T{0};
  }
}

template <typename T>
void windowCopy(const void* in, void* out, std::int64_t planes, const Spatial3& inSize, const Spatial3& outSize,
                const Spatial3& offset, cudaStream_t stream) {
  const std::int64_t total = planes * outSize.volume();
  if (total == 0)
    return;
  windowCopyKernel<T><<<blocksFor(total), kThreadsPerBlock, 0, stream>>>(
      static_cast<const T*>(in), static_cast<T*>(out), total, inSize, outSize, offset);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launchWindowCopy(std::size_t elementSize, const void* in, void* out, std::int64_t planes, const Spatial3& inSize,
                      const Spatial3& outSize, const Spatial3& offset, cudaStream_t stream) {
  // Only bits move, and all-zero bits are 0 in every float format.
  switch (elementSize) {
    case 1:
      windowCopy<std::uint8_t>(in, out, planes, inSize, outSize, offset, stream);
      break;
    case 2:
      windowCopy<std::uint16_t>(in, out, planes, inSize, outSize, offset, stream);
      break;
    case 4:
      windowCopy<std::uint32_t>(in, out, planes, inSize, outSize, offset, stream);
      break;
    case 8:
      windowCopy<std::uint64_t>(in, out, planes, inSize, outSize, offset, stream);
      break;
    default:
      fail("window copy of {}-byte elements is not supported", elementSize);
  }
}

}  // namespace strata::cuda::nn
