#include "cudnn_common.h"

#include <algorithm>
#include <limits>

namespace strata::cuda {

cudnnDataType_t cudnnDataTypeOf(DType dtype, const char* what) {
  switch (dtype) {
    case DType::Float32:
      return CUDNN_DATA_FLOAT;
    case DType::Float64:
      return CUDNN_DATA_DOUBLE;
    case DType::Float16:
      return CUDNN_DATA_HALF;
    case DType::BFloat16:
      return CUDNN_DATA_BFLOAT16;
    default:
      fail("{} on CUDA (cuDNN) supports float32, float64, float16 and bfloat16, not {}", what, dtypeName(dtype));
  }
}

Shape cudnnDims(const Shape& shape) {
  STRATA_CHECK(shape.size() >= 2 && shape.size() <= 5, "cuDNN takes tensors of rank 2 to 5, got {}",
               shapeToString(shape));
  Shape dims = shape;
  if (dims.size() == 2) {
    dims.insert(dims.end(), {1, 1});
  } else if (dims.size() == 3) {
    dims.insert(dims.begin() + 2, 1);
  }
  return dims;
}

std::vector<int> toCudnnInts(const std::vector<std::int64_t>& dims, const char* what) {
  constexpr std::int64_t kMax = std::numeric_limits<int>::max();
  std::vector<int> out;
  out.reserve(dims.size());
  std::int64_t elements = 1;
  for (std::int64_t d : dims) {
    STRATA_CHECK(d >= 0 && d <= kMax, "{} {}: dim {} is out of cuDNN's int range", what, shapeToString(dims), d);
    out.push_back(static_cast<int>(d));
    if (d > 0 && elements <= kMax)
      elements *= d;
  }
  STRATA_CHECK(elements <= kMax, "{} {} has more than {} elements, the most cuDNN takes", what, shapeToString(dims),
               kMax);
  return out;
}

TensorDescriptor::TensorDescriptor() {
  STRATA_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_));
}

TensorDescriptor::~TensorDescriptor() {
  if (desc_ != nullptr)
    cudnnDestroyTensorDescriptor(desc_);
}

void TensorDescriptor::set(DType dtype, const Shape& dims, bool channelsLast) {
  const std::vector<int> d = toCudnnInts(dims, "tensor");
  // Strides over the dims in memory order: row-major, or N, spatial..., C (cuDNN reads the layout from them).
  std::vector<std::size_t> order(d.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  if (channelsLast)
    std::rotate(order.begin() + 1, order.begin() + 2, order.end());
  std::vector<int> strides(d.size(), 1);
  int stride = 1;
  for (std::size_t i = order.size(); i-- > 0;) {
    strides[order[i]] = stride;
    stride *= std::max(d[order[i]], 1);
  }
  STRATA_CUDNN_CHECK(cudnnSetTensorNdDescriptor(desc_, cudnnDataTypeOf(dtype, "tensor"), static_cast<int>(d.size()),
                                                d.data(), strides.data()));
}

FilterDescriptor::FilterDescriptor() {
  STRATA_CUDNN_CHECK(cudnnCreateFilterDescriptor(&desc_));
}

FilterDescriptor::~FilterDescriptor() {
  if (desc_ != nullptr)
    cudnnDestroyFilterDescriptor(desc_);
}

void FilterDescriptor::set(DType dtype, const Shape& dims, bool channelsLast) {
  const std::vector<int> d = toCudnnInts(dims, "filter");
  STRATA_CUDNN_CHECK(cudnnSetFilterNdDescriptor(desc_, cudnnDataTypeOf(dtype, "filter"),
                                                channelsLast ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                                static_cast<int>(d.size()), d.data()));
}

ConvolutionDescriptor::ConvolutionDescriptor() {
  STRATA_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&desc_));
}

ConvolutionDescriptor::~ConvolutionDescriptor() {
  if (desc_ != nullptr)
    cudnnDestroyConvolutionDescriptor(desc_);
}

PoolingDescriptor::PoolingDescriptor() {
  STRATA_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&desc_));
}

PoolingDescriptor::~PoolingDescriptor() {
  if (desc_ != nullptr)
    cudnnDestroyPoolingDescriptor(desc_);
}

Tensor workspaceBytes(std::size_t bytes, Device device) {
  if (bytes == 0)
    return Tensor();
  return Tensor::empty(DType::UInt8, {static_cast<std::int64_t>(bytes)}, MemoryCategory::Workspace, device);
}

}  // namespace strata::cuda
