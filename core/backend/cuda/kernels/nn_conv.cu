// The spatial pad / crop copy that lets cuDNN's symmetric-padding convolutions run ONNX's asymmetric pads, and the
// bias gradient of the 16-bit convolutions, summed in float (cudnn_conv.cpp).

#include "nn_kernels.h"
#include "reduce_kernels.cuh"

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

// The reduction engine's op for db[c] = sum of dy over everything but the channels.
template <typename T>
struct ChannelSumOp {
  using Acc = typename AccTypeOf<T>::type;
  const T* dy;
  T* db;
  __device__ Acc init() const { return Acc(0); }
  __device__ Acc map(std::int64_t offset, std::int64_t, std::int64_t) const { return toAcc(dy[offset]); }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
  __device__ void finish(Acc a, std::int64_t o) const { db[o] = fromAcc<T>(a); }
};

template <typename T>
void channelSum(const void* dy, void* db, std::int64_t batch, std::int64_t channels, std::int64_t inner, Device device,
                cudaStream_t stream) {
  // dy as [batch, channels, inner]: channel c starts at c * inner; the reduced (n, i) at n * channels * inner + i.
  reduce::ReduceGeometry g;
  g.outCount = channels;
  g.reduceCount = batch * inner;
  g.kept.rank = 1;
  g.kept.sizes[0] = channels;
  g.kept.strides[0] = inner;
  g.reduced.rank = 2;
  g.reduced.sizes[0] = batch;
  g.reduced.strides[0] = channels * inner;
  g.reduced.sizes[1] = inner;
  g.reduced.strides[1] = 1;
  g.innerReduced = inner > 1;
  if (inner == 1 || batch == 1) {  // one reduced axis: the engine's cheap rank-1 offsets
    g.reduced.rank = 1;
    g.reduced.sizes[0] = batch * inner;
    g.reduced.strides[0] = inner == 1 ? channels : 1;
  }
  if (g.reduceCount == 0) {
    STRATA_CUDA_CHECK(cudaMemsetAsync(db, 0, static_cast<std::size_t>(channels) * sizeof(T), stream));
    return;
  }
  reduce::launchReduce(ChannelSumOp<T>{static_cast<const T*>(dy), static_cast<T*>(db)}, g, device, stream);
}

}  // namespace

void launchChannelSum(DType dtype, const void* dy, void* db, std::int64_t batch, std::int64_t channels,
                      std::int64_t inner, Device device, cudaStream_t stream) {
  switch (dtype) {
    case DType::Float16:
      channelSum<__half>(dy, db, batch, channels, inner, device, stream);
      break;
    case DType::BFloat16:
      channelSum<__nv_bfloat16>(dy, db, batch, channels, inner, device, stream);
      break;
    default:
      fail("convolution bias gradient on CUDA (own kernel): unsupported dtype {}", dtypeName(dtype));
  }
}

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
