#pragma once

// Shared cuDNN plumbing for cudnn_conv.cpp, cudnn_pool.cpp and cudnn_batchnorm.cpp: owning descriptor wrappers,
// dtype mapping, scaling factors, dims as cuDNN wants them and workspace memory.

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda_check.h"
#include "strata/device.h"
#include "strata/shape.h"
#include "strata/tensor.h"

namespace strata::cuda {

// CUDNN_DATA_FLOAT / DOUBLE / HALF / BFLOAT16; any other dtype is an error naming `what`.
cudnnDataType_t cudnnDataTypeOf(DType dtype, const char* what);

// cuDNN's alpha / beta blend factors: double for float64 tensors, float for the others.
class CudnnScalars {
 public:
  explicit CudnnScalars(DType dtype) : double_(dtype == DType::Float64) {}
  const void* one() const { return double_ ? static_cast<const void*>(&d_[0]) : static_cast<const void*>(&f_[0]); }
  const void* zero() const { return double_ ? static_cast<const void*>(&d_[1]) : static_cast<const void*>(&f_[1]); }

 private:
  bool double_;
  float f_[2] = {1.0F, 0.0F};
  double d_[2] = {1.0, 0.0};
};

// A shape as cuDNN's 4-D/5-D descriptors take it: (N, C) -> (N, C, 1, 1), (N, C, L) -> (N, C, 1, L), ranks 4 and
// 5 unchanged.
Shape cudnnDims(const Shape& shape);
// `dims` as ints (cuDNN's type); throws naming `what` when a dim or the element count exceeds INT32_MAX.
std::vector<int> toCudnnInts(const std::vector<std::int64_t>& dims, const char* what);

// Owning descriptors; created empty, set once at plan time.
class TensorDescriptor {
 public:
  TensorDescriptor();
  ~TensorDescriptor();
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
  // A contiguous tensor of `dims` (4 or 5 of them; see cudnnDims), given in cuDNN's logical order N, C, spatial...
  // whatever the layout: row-major, or with channelsLast N, spatial..., C in memory (NHWC / NDHWC strides).
  void set(DType dtype, const Shape& dims, bool channelsLast = false);
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

class FilterDescriptor {
 public:
  FilterDescriptor();
  ~FilterDescriptor();
  FilterDescriptor(const FilterDescriptor&) = delete;
  FilterDescriptor& operator=(const FilterDescriptor&) = delete;
  // Filters of `dims` (O, I / group, k...): in ONNX's layout, cuDNN's NCHW filter format, or with channelsLast in
  // memory as (O, k..., I / group), cuDNN's NHWC (KRSC) format; the dims keep their logical order either way.
  void set(DType dtype, const Shape& dims, bool channelsLast = false);
  cudnnFilterDescriptor_t get() const { return desc_; }

 private:
  cudnnFilterDescriptor_t desc_ = nullptr;
};

class ConvolutionDescriptor {
 public:
  ConvolutionDescriptor();
  ~ConvolutionDescriptor();
  ConvolutionDescriptor(const ConvolutionDescriptor&) = delete;
  ConvolutionDescriptor& operator=(const ConvolutionDescriptor&) = delete;
  cudnnConvolutionDescriptor_t get() const { return desc_; }

 private:
  cudnnConvolutionDescriptor_t desc_ = nullptr;
};

class PoolingDescriptor {
 public:
  PoolingDescriptor();
  ~PoolingDescriptor();
  PoolingDescriptor(const PoolingDescriptor&) = delete;
  PoolingDescriptor& operator=(const PoolingDescriptor&) = delete;
  cudnnPoolingDescriptor_t get() const { return desc_; }

 private:
  cudnnPoolingDescriptor_t desc_ = nullptr;
};

// Device scratch memory from the caching allocator (an undefined tensor for 0 bytes).
Tensor workspaceBytes(std::size_t bytes, Device device);
// Its device pointer, nullptr for an undefined tensor.
inline void* workspacePointer(const Tensor& workspace) {
  return workspace.defined() ? workspace.rawData() : nullptr;
}

}  // namespace strata::cuda
