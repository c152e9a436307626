#pragma once

// Launchers of the CUDA shape and data-movement kernels (data_movement*.cu). The host-side op code
// (data_movement*_ops.cpp) mirrors the CPU kernels with the CPU's own plan helpers and calls these with raw device
// pointers; every launcher enqueues on `stream` and never synchronises, except where it says so.
//
// Note [Index validation]: indices that are plan-time constants are checked on the host. Indices computed at run
// time are checked by the kernels that read them: a bad index is skipped (nothing is read or written out of
// bounds) and its flat position recorded in an IndexFlag; the op then reads the flag back (one stream
// synchronisation) and fails naming the op, the index, the axis and its size, as the CPU kernels do. This checks
// index tensors of any size for the price of one 8-byte copy.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../../cpu/data_movement_plan.h"
#include "strata/op_registry.h"
#include "strata/shape.h"
#include "strata/tensor.h"

namespace strata::cuda::dm {

using Strides = std::vector<std::int64_t>;

// The smallest flat position of an out-of-range index that a kernel met (Note [Index validation]).
class IndexFlag {
 public:
  // Allocates the flag on `device` and clears it on `stream`.
  IndexFlag(Device device, cudaStream_t stream);
  // What kernels get: nullptr disables recording.
  unsigned long long* device() const { return ptr_; }
  // Synchronises the stream; -1 when no bad index was met, else its flat position.
  std::int64_t firstBad() const;

 private:
  Tensor storage_;
  unsigned long long* ptr_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// Element `position` of a device int32 / int64 tensor, read synchronously (for error messages).
std::int64_t readIndex(const Tensor& indices, std::int64_t position, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------------
// Copies (data_movement.cu). Strides are in elements, may be zero (broadcast) or negative (reversed slices);
// shapes may have any rank, unit axes and mergeable axes are folded away, and at most 8 axes may remain.

void copyBytes(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);
// Writes `bytes` of host memory to the device through kernel arguments: the host buffer may die on return.
// For small values (Shape, Size); large constants use cudaMemcpyAsync from memory that outlives the copy.
void writeFromHost(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);
// Fills `count` elements of `elemSize` bytes with the element at host address `value`.
void fillElements(void* dst, std::int64_t count, std::size_t elemSize, const void* value, cudaStream_t stream);
// Copies `rows` rows of `rowBytes` bytes: row r of src starts at r * srcPitch, of dst at r * dstPitch (Concat, Split).
void copyRows(void* dst, std::size_t dstPitch, const void* src, std::size_t srcPitch, std::size_t rowBytes,
              std::int64_t rows, cudaStream_t stream);
// dst (contiguous, of `shape`) = the view of src with `srcStrides`.
void stridedCopy(void* dst, const void* src, const Shape& shape, const Strides& srcStrides, std::size_t elemSize,
                 cudaStream_t stream);
// The view of dst with `dstStrides` = src (contiguous, of `shape`). The view must not overlap itself.
void stridedScatter(void* dst, const void* src, const Shape& shape, const Strides& dstStrides, std::size_t elemSize,
                    cudaStream_t stream);
// Transposes contiguous src of inShape into contiguous dst: output axis i is input axis perm[i] (perm normalised).
void transpose(void* dst, const void* src, const Shape& inShape, const std::vector<std::int64_t>& perm,
               std::size_t elemSize, cudaStream_t stream);

// The CPU's slice_pad::PadMode, in the same order.
enum class PadKind { Constant, Reflect, Edge, Wrap };

// Pad: output element o reads input padSource(o) per axis, or the constant when any axis has none. The constant is
// read from `deviceValue` (one element on the device) when it is not null, else from host address `hostValue`.
void pad(void* dst, const void* src, const Shape& inShape, const Shape& outShape,
         const std::vector<std::int64_t>& begin, PadKind mode, std::size_t elemSize, const void* deviceValue,
         const void* hostValue, cudaStream_t stream);

// Trilu over `rows` rows of `cols` elements (rowsPerMatrix rows per matrix). The diagonal offset is *deviceK
// (int64 on the device) when deviceK is not null, else k.
void trilu(void* dst, const void* src, std::int64_t rows, std::int64_t rowsPerMatrix, std::int64_t cols, bool upper,
           std::int64_t k, const std::int64_t* deviceK, std::size_t elemSize, cudaStream_t stream);

// Range: dst[i] = start + i * delta for i < n, start and delta read on the device (float32, float64, int32, int64).
void range(void* dst, DType dtype, std::int64_t n, const void* start, const void* delta, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------------
// Indexing (data_movement_indexing.cu). Index tensors are int32 or int64 (`indexType`); negative indices count
// from the end of their axis.

// Gather: dst[o, j, c] = data[o, idx[j], c] for o < outer, j < n, c < innerBytes bytes; dim is the axis size.
void gather(void* dst, const void* data, const void* indices, DType indexType, std::int64_t outer, std::int64_t dim,
            std::int64_t n, std::size_t innerBytes, unsigned long long* bad, cudaStream_t stream);

// Only validates n indices against an axis of size dim (for launches that move nothing).
void checkIndices(const void* indices, DType indexType, std::int64_t n, std::int64_t dim, unsigned long long* bad,
                  cudaStream_t stream);

// GatherElements: dst[p] = data[p with its axis coordinate replaced by idx[p]]; indexShape has data's rank.
void gatherElements(void* dst, const void* data, const void* indices, DType indexType, const Shape& indexShape,
                    const Shape& dataShape, std::size_t axis, std::size_t elemSize, unsigned long long* bad,
                    cudaStream_t stream);

// GatherND / ScatterND geometry: indices [batch, tuples, k] address slices of sliceElems elements of data
// [batch, dims..., slice]; strides are data's (in elements) on the k indexed axes, batchElems the data elements
// per batch.
struct NdGeometry {
  std::int64_t batch = 1;
  std::int64_t tuples = 1;
  std::int64_t k = 0;
  std::int64_t sliceElems = 1;
  std::int64_t batchElems = 0;
  std::vector<std::int64_t> dims;
  std::vector<std::int64_t> strides;
};

void gatherND(void* dst, const void* data, const std::int64_t* indices, const NdGeometry& geometry,
              std::size_t elemSize, Device device, unsigned long long* bad, cudaStream_t stream);

// The reduction attribute of ScatterElements / ScatterND, as the CPU reads it.
using Reduction = cpu::shape_detail::ScatterReduction;

// ScatterElements into dst (already holding data): updates[p] combines into dst[p with its axis coordinate replaced
// by idx[p]]. Repeated targets combine in index order (a stable sort by target), as the CPU's serial loop does.
// Temporary memory comes from `device`'s caching allocator.
void scatterElements(void* dst, const void* updates, const void* indices, DType indexType, const Shape& indexShape,
                     const Shape& dataShape, std::size_t axis, DType dtype, Reduction reduction, Device device,
                     unsigned long long* bad, cudaStream_t stream);

// ScatterND into dst (already holding data, batch 1): slice t of updates combines into the slice tuple t addresses.
void scatterND(void* dst, const void* updates, const std::int64_t* indices, const NdGeometry& geometry, DType dtype,
               Reduction reduction, Device device, unsigned long long* bad, cudaStream_t stream);

// OneHot: dst[o, d, r] = on if the index at [o, r] (negative counts from depth) is d, else off. values holds
// [off, on] on the device; indices may have any dtype (converted as the CPU's toInt64Vector does).
void oneHot(void* dst, const void* indices, DType indexType, const void* values, std::int64_t outer, std::int64_t depth,
            std::int64_t inner, std::size_t elemSize, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------------
// Gradients (data_movement_grad.cu). dtype is a floating-point type.

// GatherGrad: dx[o, r, c] = sum of dy[o, j, c] over j with idx[j] == r, in index order, accumulated in float
// (double for double); every element of dx is written.
void gatherGrad(void* dx, const void* dy, const void* indices, DType indexType, DType dtype, std::int64_t outer,
                std::int64_t dim, std::int64_t n, std::int64_t inner, Device device, unsigned long long* bad,
                cudaStream_t stream);

// One axis of PadGrad: dst [outer, dim, inner] gets, for each element, the sum of the src [outer, srcRows, inner]
// elements that Pad copied from it along this axis (begin is the axis' begin pad, negative crops).
void padGradFold(void* dst, const void* src, DType dtype, std::int64_t outer, std::int64_t srcRows, std::int64_t dim,
                 std::int64_t inner, std::int64_t begin, PadKind mode, cudaStream_t stream);

}  // namespace strata::cuda::dm
