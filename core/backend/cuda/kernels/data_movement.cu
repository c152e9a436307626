// CUDA copy kernels behind Reshape-like copies, Transpose, Concat, Split, Slice, Expand, Tile, Pad, Trilu,
// ConstantOfShape, Range, Shape and Size (the op code is in data_movement_ops.cpp).

#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <utility>

#include "../../cpu/strided_axes.h"
#include "data_movement_device.cuh"

namespace strata::cuda::dm {

namespace {

constexpr std::int64_t kTile = 32;
constexpr int kTileRows = 8;  // threads per tile column: each thread moves kTile / kTileRows elements

template <typename T>
__global__ void stridedCopyKernel(T* dst, const T* src, Indexer view, std::int64_t n) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    dst[i] = src[view.offset(i)];
  }
}

template <typename T>
__global__ void stridedScatterKernel(T* dst, const T* src, Indexer view, std::int64_t n) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    dst[view.offset(i)] = src[i];
  }
}

template <typename T>
__global__ void copyRowsKernel(T* dst, std::int64_t dstPitch, const T* src, std::int64_t srcPitch, std::int64_t row,
                               std::int64_t n) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    const std::int64_t r = i / row;
    const std::int64_t c = i % row;
    dst[r * dstPitch + c] = src[r * srcPitch + c];
  }
}

template <typename T>
__global__ void fillKernel(T* dst, T value, std::int64_t n) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    dst[i] = value;
  }
}

constexpr std::size_t kHostChunk = 1024;

struct HostChunk {
  unsigned char bytes[kHostChunk];
};

__global__ void writeChunkKernel(unsigned char* dst, HostChunk chunk, int n) {
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
    dst[i] = chunk.bytes[i];
  }
}

// Batched 2-D transposes through shared memory: dst[outBase + a * dstStrideA + b] = src[inBase + b * srcStrideB + a]
// for a < da, b < db, with both innermost runs (a in src, b in dst) read and written coalesced. Grid dimensions
// are capped, so every level loops.
template <typename T>
__global__ void transposeTilesKernel(T* dst, const T* src, std::int64_t da, std::int64_t db, std::int64_t dstStrideA,
                                     std::int64_t srcStrideB, std::int64_t batches, Indexer inBatch, Indexer outBatch) {
  __shared__ T tile[kTile][kTile + 1];
  const std::int64_t tilesA = (da + kTile - 1) / kTile;
  const std::int64_t tilesB = (db + kTile - 1) / kTile;
  const auto tx = static_cast<std::int64_t>(threadIdx.x);
  for (std::int64_t batch = blockIdx.z; batch < batches; batch += gridDim.z) {
    const std::int64_t inBase = inBatch.offset(batch);
    const std::int64_t outBase = outBatch.offset(batch);
    for (std::int64_t ta = blockIdx.y; ta < tilesA; ta += gridDim.y) {
      for (std::int64_t tb = blockIdx.x; tb < tilesB; tb += gridDim.x) {
        const std::int64_t a0 = ta * kTile;
        const std::int64_t b0 = tb * kTile;
        for (std::int64_t j = threadIdx.y; j < kTile; j += kTileRows) {
          const std::int64_t a = a0 + tx;
          const std::int64_t b = b0 + j;
          if (a < da && b < db) {
            tile[j][tx] = src[inBase + b * srcStrideB + a];
          }
        }
        __syncthreads();
        for (std::int64_t j = threadIdx.y; j < kTile; j += kTileRows) {
          const std::int64_t a = a0 + j;
          const std::int64_t b = b0 + tx;
          if (a < da && b < db) {
            dst[outBase + a * dstStrideA + b] = tile[tx][j];
          }
        }
        __syncthreads();
      }
    }
  }
}

struct PadParams {
  int rank = 0;
  PadKind mode = PadKind::Constant;
  std::int64_t outDims[kMaxDims] = {};
  std::int64_t inDims[kMaxDims] = {};
  std::int64_t begin[kMaxDims] = {};
  std::int64_t inStrides[kMaxDims] = {};
};

template <typename T>
__global__ void padKernel(T* dst, const T* src, PadParams p, const T* deviceValue, T hostValue, std::int64_t n) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    std::int64_t rem = i;
    std::int64_t offset = 0;
    bool constant = false;
    for (int d = p.rank - 1; d >= 0; --d) {
      const std::int64_t o = rem % p.outDims[d];
      rem /= p.outDims[d];
      const std::int64_t s = padSourceIndex(o, p.begin[d], p.inDims[d], p.mode);
      if (s < 0) {
        constant = true;
        break;
      }
      offset += s * p.inStrides[d];
    }
    if (constant) {
      dst[i] = deviceValue != nullptr ? *deviceValue : hostValue;
    } else {
      dst[i] = src[offset];
    }
  }
}

template <typename T>
__global__ void triluKernel(T* dst, const T* src, std::int64_t rowsPerMatrix, std::int64_t cols, bool upper,
                            std::int64_t k, const std::int64_t* deviceK, std::int64_t n) {
  const std::int64_t diagonal = deviceK != nullptr ? *deviceK : k;
  STRATA_GRID_STRIDE_LOOP(i, n) {
    const std::int64_t j = i % cols;
    const std::int64_t r = (i / cols) % rowsPerMatrix;
    // Upper keeps columns j >= r + k; lower keeps j <= r + k.
    const bool keep = upper ? j - r >= diagonal : j - r <= diagonal;
    dst[i] = keep ? src[i] : T{};
  }
}

template <typename T>
__global__ void rangeIntKernel(T* dst, const T* start, const T* delta, std::int64_t n) {
  const auto s = static_cast<std::int64_t>(*start);
  const auto d = static_cast<std::int64_t>(*delta);
  STRATA_GRID_STRIDE_LOOP(i, n) {
    dst[i] = static_cast<T>(s + i * d);
  }
}

template <typename T>
__global__ void rangeFloatKernel(T* dst, const T* start, const T* delta, std::int64_t n) {
  const auto s = static_cast<double>(*start);
  const auto d = static_cast<double>(*delta);
  STRATA_GRID_STRIDE_LOOP(i, n) {
    dst[i] = static_cast<T>(s + static_cast<double>(i) * d);
  }
}

// Widens elements to words when the innermost axis is contiguous and every offset stays word-aligned; rescales
// dims and strides to words. Returns the word size.
std::size_t widen(Shape& dims, Strides& strides, std::size_t elemSize, const void* a, const void* b) {
  if (dims.empty() || strides.back() != 1) {
    return elemSize;
  }
  std::size_t word = wordSizeFor({addressOf(a), addressOf(b), dims.back() * elemSize});
  for (std::size_t k = 0; k + 1 < strides.size(); ++k) {
    word = std::min(word,
                    wordSizeFor({static_cast<std::uintptr_t>(strides[k] < 0 ? -strides[k] : strides[k]) * elemSize}));
  }
  if (word <= elemSize) {
    return elemSize;
  }
  const auto ratio = static_cast<std::int64_t>(word / elemSize);
  dims.back() /= ratio;
  for (std::size_t k = 0; k + 1 < strides.size(); ++k) {
    strides[k] /= ratio;
  }
  return word;
}

// Shared by stridedCopy and stridedScatter: `scatter` selects the direction.
void stridedMove(void* dst, const void* src, const Shape& shape, const Strides& strides, std::size_t elemSize,
                 bool scatter, cudaStream_t stream) {
  Shape dims;
  Strides viewStrides;
  if (!cpu::mergeStridedAxes(shape, strides, dims, viewStrides)) {
    return;
  }
  if (dims.empty()) {
    copyBytes(dst, src, elemSize, stream);
    return;
  }
  if (dims.size() == 1 && viewStrides[0] == 1) {
    copyBytes(dst, src, static_cast<std::size_t>(dims[0]) * elemSize, stream);
    return;
  }
  const std::size_t word = widen(dims, viewStrides, elemSize, dst, src);
  const Indexer view = makeIndexer(dims, viewStrides, scatter ? "a strided scatter" : "a strided copy");
  const std::int64_t n = numElements(dims);
  visitWord(word, [&](auto tag) {
    using T = decltype(tag);
    if (scatter) {
      stridedScatterKernel<T>
          <<<blocksFor(n), kThreadsPerBlock, 0, stream>>>(static_cast<T*>(dst), static_cast<const T*>(src), view, n);
    } else {
      stridedCopyKernel<T>
          <<<blocksFor(n), kThreadsPerBlock, 0, stream>>>(static_cast<T*>(dst), static_cast<const T*>(src), view, n);
    }
    STRATA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void copyBytes(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0 || dst == src) {
    return;
  }
  STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

void writeFromHost(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  for (std::size_t done = 0; done < bytes; done += kHostChunk) {
    const std::size_t n = std::min(kHostChunk, bytes - done);
    HostChunk chunk{};
    std::memcpy(chunk.bytes, s + done, n);
    writeChunkKernel<<<1, kThreadsPerBlock, 0, stream>>>(d + done, chunk, static_cast<int>(n));
    STRATA_CUDA_CHECK_LAUNCH();
  }
}

void fillElements(void* dst, std::int64_t count, std::size_t elemSize, const void* value, cudaStream_t stream) {
  if (count <= 0) {
    return;
  }
  const auto* v = static_cast<const unsigned char*>(value);
  if (std::all_of(v, v + elemSize, [](unsigned char c) { return c == 0; })) {
    STRATA_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<std::size_t>(count) * elemSize, stream));
    return;
  }
  visitWord(elemSize, [&](auto tag) {
    using T = decltype(tag);
    T word{};
    std::memcpy(&word, value, sizeof(T));
    fillKernel<T><<<blocksFor(count), kThreadsPerBlock, 0, stream>>>(static_cast<T*>(dst), word, count);
    STRATA_CUDA_CHECK_LAUNCH();
  });
}

void copyRows(void* dst, std::size_t dstPitch, const void* src, std::size_t srcPitch, std::size_t rowBytes,
              std::int64_t rows, cudaStream_t stream) {
  if (rows <= 0 || rowBytes == 0) {
    return;
  }
  if (rows == 1 || (rowBytes == dstPitch && rowBytes == srcPitch)) {
    copyBytes(dst, src, static_cast<std::size_t>(rows) * rowBytes, stream);
    return;
  }
  const std::size_t word = wordSizeFor({addressOf(dst), addressOf(src), dstPitch, srcPitch, rowBytes});
  const auto row = static_cast<std::int64_t>(rowBytes / word);
  const std::int64_t n = rows * row;
  visitWord(word, [&](auto tag) {
    using T = decltype(tag);
    copyRowsKernel<T><<<blocksFor(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<T*>(dst), static_cast<std::int64_t>(dstPitch / word), static_cast<const T*>(src),
        static_cast<std::int64_t>(srcPitch / word), row, n);
    STRATA_CUDA_CHECK_LAUNCH();
  });
}

void stridedCopy(void* dst, const void* src, const Shape& shape, const Strides& srcStrides, std::size_t elemSize,
                 cudaStream_t stream) {
  stridedMove(dst, src, shape, srcStrides, elemSize, false, stream);
}

void stridedScatter(void* dst, const void* src, const Shape& shape, const Strides& dstStrides, std::size_t elemSize,
                    cudaStream_t stream) {
  stridedMove(dst, src, shape, dstStrides, elemSize, true, stream);
}

void transpose(void* dst, const void* src, const Shape& inShape, const std::vector<std::int64_t>& perm,
               std::size_t elemSize, cudaStream_t stream) {
  const std::int64_t count = numElements(inShape);
  if (count == 0) {
    return;
  }
  // As the CPU's transposeBytes: drop unit axes, then merge output axes that are consecutive input axes.
  const cpu::shape_detail::TransposePlan plan = cpu::shape_detail::planTranspose(inShape, perm);
  if (plan.copy) {
    copyBytes(dst, src, static_cast<std::size_t>(count) * elemSize, stream);
    return;
  }
  if (plan.rowsContiguous) {
    // The innermost axis stays innermost: a strided copy of contiguous rows.
    stridedCopy(dst, src, plan.shape, plan.srcStrides, elemSize, stream);
    return;
  }
  // Batched 2-D transposes between the input's innermost axis (a, output axis q) and the output's (b).
  const Shape& batchDims = plan.batchDims;
  const Strides& batchIn = plan.batchIn;
  const Strides& batchOut = plan.batchOut;
  const Indexer inBatch = makeIndexer(batchDims, batchIn, "Transpose");
  const Indexer outBatch = makeIndexer(batchDims, batchOut, "Transpose");
  const std::int64_t da = plan.da;
  const std::int64_t db = plan.db;
  const std::int64_t batches = numElements(batchDims);
  constexpr std::int64_t kMaxGrid = 65535;
  const dim3 grid(static_cast<unsigned>(std::min<std::int64_t>((db + kTile - 1) / kTile, kMaxGrid)),
                  static_cast<unsigned>(std::min<std::int64_t>((da + kTile - 1) / kTile, kMaxGrid)),
                  static_cast<unsigned>(std::min<std::int64_t>(batches, kMaxGrid)));
  const dim3 block(static_cast<unsigned>(kTile), static_cast<unsigned>(kTileRows));
  visitWord(elemSize, [&](auto tag) {
    using T = decltype(tag);
    transposeTilesKernel<T><<<grid, block, 0, stream>>>(static_cast<T*>(dst), static_cast<const T*>(src), da, db,
                                                        plan.dstStrideA, plan.srcStrideB, batches, inBatch, outBatch);
    STRATA_CUDA_CHECK_LAUNCH();
  });
}

void pad(void* dst, const void* src, const Shape& inShape, const Shape& outShape,
         const std::vector<std::int64_t>& begin, PadKind mode, std::size_t elemSize, const void* deviceValue,
         const void* hostValue, cudaStream_t stream) {
  const std::int64_t n = numElements(outShape);
  if (n == 0) {
    return;
  }
  STRATA_CHECK(outShape.size() <= static_cast<std::size_t>(kMaxDims), "Pad on CUDA takes at most {} dimensions, got {}",
               kMaxDims, outShape.size());
  PadParams params;
  params.rank = static_cast<int>(outShape.size());
  params.mode = mode;
  const auto inStrides = contiguousStrides(inShape);
  for (std::size_t d = 0; d < outShape.size(); ++d) {
    params.outDims[d] = outShape[d];
    params.inDims[d] = inShape[d];
    params.begin[d] = begin[d];
    params.inStrides[d] = inStrides[d];
  }
  visitWord(elemSize, [&](auto tag) {
    using T = decltype(tag);
    T value{};
    std::memcpy(&value, hostValue, sizeof(T));
    padKernel<T><<<blocksFor(n), kThreadsPerBlock, 0, stream>>>(static_cast<T*>(dst), static_cast<const T*>(src),
                                                                params, static_cast<const T*>(deviceValue), value, n);
    STRATA_CUDA_CHECK_LAUNCH();
  });
}

void trilu(void* dst, const void* src, std::int64_t rows, std::int64_t rowsPerMatrix, std::int64_t cols, bool upper,
           std::int64_t k, const std::int64_t* deviceK, std::size_t elemSize, cudaStream_t stream) {
  const std::int64_t n = rows * cols;
  if (n == 0) {
    return;
  }
  visitWord(elemSize, [&](auto tag) {
    using T = decltype(tag);
    triluKernel<T><<<blocksFor(n), kThreadsPerBlock, 0, stream>>>(static_cast<T*>(dst), static_cast<const T*>(src),
                                                                  rowsPerMatrix, cols, upper, k, deviceK, n);
    STRATA_CUDA_CHECK_LAUNCH();
  });
}

void range(void* dst, DType dtype, std::int64_t n, const void* start, const void* delta, cudaStream_t stream) {
  if (n == 0) {
    return;
  }
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    auto* d = static_cast<T*>(dst);
    const auto* s = static_cast<const T*>(start);
    const auto* step = static_cast<const T*>(delta);
    if constexpr (std::is_integral_v<T>) {
      rangeIntKernel<T><<<blocksFor(n), kThreadsPerBlock, 0, stream>>>(d, s, step, n);
    } else {
      rangeFloatKernel<T><<<blocksFor(n), kThreadsPerBlock, 0, stream>>>(d, s, step, n);
    }
    STRATA_CUDA_CHECK_LAUNCH();
  };
  switch (dtype) {
    case DType::Int64:
      launch(std::int64_t{});
      return;
    case DType::Int32:
      launch(std::int32_t{});
      return;
    case DType::Float64:
      launch(double{});
      return;
    case DType::Float32:
      launch(float{});
      return;
    default:
      fail("Range: type {} is not supported", dtypeName(dtype));
  }
}

}  // namespace strata::cuda::dm
