// CUDA kernels behind Gather, GatherElements, GatherND, ScatterElements, ScatterND and OneHot (the op code is in
// data_movement_indexing_ops.cpp), and the index validation and stable sort they share with GatherGrad.

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <type_traits>

#include "data_movement_device.cuh"

namespace strata::cuda::dm {

namespace {

template <typename T, typename I>
__global__ void gatherKernel(T* dst, const T* src, const I* idx, std::int64_t n, std::int64_t dim, std::int64_t inner,
                             std::int64_t total, unsigned long long* bad) {
  STRATA_GRID_STRIDE_LOOP(i, total) {
    const std::int64_t c = i % inner;
    const std::int64_t t = i / inner;
    const std::int64_t j = t % n;
    const std::int64_t v = wrapIndex(static_cast<std::int64_t>(idx[j]), dim);
    if (v < 0) {
      recordBadIndex(bad, j);
      continue;
    }
    dst[i] = src[((t / n) * dim + v) * inner + c];
  }
}

template <typename I>
__global__ void checkIndicesKernel(const I* idx, std::int64_t n, std::int64_t dim, unsigned long long* bad) {
  STRATA_GRID_STRIDE_LOOP(j, n) {
    if (wrapIndex(static_cast<std::int64_t>(idx[j]), dim) < 0) {
      recordBadIndex(bad, j);
    }
  }
}

// `base` walks the index tensor's shape with data's strides and a zero stride on the axis.
template <typename T, typename I>
__global__ void gatherElementsKernel(T* dst, const T* src, const I* idx, Indexer base, std::int64_t axisStride,
                                     std::int64_t dim, std::int64_t n, unsigned long long* bad) {
  STRATA_GRID_STRIDE_LOOP(p, n) {
    const std::int64_t v = wrapIndex(static_cast<std::int64_t>(idx[p]), dim);
    if (v < 0) {
      recordBadIndex(bad, p);
      continue;
    }
    dst[p] = src[base.offset(p) + v * axisStride];
  }
}

template <typename I>
__global__ void elementKeysKernel(unsigned long long* keys, long long* positions, const I* idx, Indexer base,
                                  std::int64_t axisStride, std::int64_t dim, std::int64_t n,
                                  unsigned long long sentinel, unsigned long long* bad) {
  STRATA_GRID_STRIDE_LOOP(p, n) {
    const std::int64_t v = wrapIndex(static_cast<std::int64_t>(idx[p]), dim);
    if (v < 0) {
      recordBadIndex(bad, p);
      keys[p] = sentinel;
    } else {
      keys[p] = static_cast<unsigned long long>(base.offset(p) + v * axisStride);
    }
    positions[p] = p;
  }
}

struct NdParams {
  int k = 0;
  std::int64_t dims[kMaxDims] = {};
  std::int64_t strides[kMaxDims] = {};
};

// The element offset (within its batch of data) of index tuple t, or -1 when a coordinate is out of range.
__device__ inline std::int64_t ndOffset(const std::int64_t* idx, const NdParams& p, std::int64_t t,
                                        unsigned long long* bad) {
  std::int64_t offset = 0;
  for (int j = 0; j < p.k; ++j) {
    const std::int64_t position = t * p.k + j;
    const std::int64_t v = wrapIndex(idx[position], p.dims[j]);
    if (v < 0) {
      recordBadIndex(bad, position);
      return -1;
    }
    offset += v * p.strides[j];
  }
  return offset;
}

__global__ void ndOffsetsKernel(long long* offsets, const std::int64_t* idx, NdParams p, std::int64_t tuples,
                                unsigned long long* bad) {
  STRATA_GRID_STRIDE_LOOP(t, tuples) {
    offsets[t] = ndOffset(idx, p, t, bad);
  }
}

// Offsets are in elements; the copy moves words of `word` bytes (slices and offsets are multiples of words).
template <typename T>
__global__ void gatherNDKernel(T* dst, const T* src, const long long* offsets, std::int64_t tuplesPerBatch,
                               std::int64_t batchWords, std::int64_t sliceWords, std::int64_t elemSize,
                               std::int64_t word, std::int64_t total) {
  STRATA_GRID_STRIDE_LOOP(i, total) {
    const std::int64_t t = i / sliceWords;
    const std::int64_t offset = offsets[t];
    if (offset < 0) {
      continue;
    }
    dst[i] = src[(t / tuplesPerBatch) * batchWords + offset * elemSize / word + i % sliceWords];
  }
}

__global__ void ndKeysKernel(unsigned long long* keys, long long* positions, const std::int64_t* idx, NdParams p,
                             std::int64_t tuples, std::int64_t sliceElems, unsigned long long sentinel,
                             unsigned long long* bad) {
  STRATA_GRID_STRIDE_LOOP(t, tuples) {
    const std::int64_t offset = ndOffset(idx, p, t, bad);
    keys[t] = offset < 0 ? sentinel : static_cast<unsigned long long>(sliceElems > 0 ? offset / sliceElems : 0);
    positions[t] = t;
  }
}

// The CPU's combine / reduceInto for one element: 16-bit floats combine in float and round at every step, bool
// treats add and max as or, mul and min as and.
template <typename T>
__device__ inline T combineValues(T a, T b, Reduction r) {
  if constexpr (std::is_same_v<T, bool>) {
    switch (r) {
      case Reduction::None:
        return b;
      case Reduction::Add:
      case Reduction::Max:
        return a || b;
      case Reduction::Mul:
      case Reduction::Min:
        return a && b;
    }
    return b;
  } else if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
    return fromAcc<T>(combineValues<float>(toAcc(a), toAcc(b), r));
  } else {
    switch (r) {
      case Reduction::None:
        return b;
      case Reduction::Add:
        return static_cast<T>(a + b);
      case Reduction::Mul:
        return static_cast<T>(a * b);
      case Reduction::Max:
        return a < b ? b : a;
      case Reduction::Min:
        return b < a ? b : a;
    }
    return b;
  }
}

// After a stable sort by target unit: the first pair of each run of equal keys combines the whole run, in input
// order, into its target (units of unitElems elements; keys >= units are invalid and skipped).
template <typename T>
__global__ void scatterSortedKernel(T* dst, const T* updates, const unsigned long long* keys,
                                    const long long* positions, std::int64_t n, std::int64_t unitElems,
                                    unsigned long long units, Reduction reduction, std::int64_t total) {
  STRATA_GRID_STRIDE_LOOP(i, total) {
    const std::int64_t s = i / unitElems;
    const std::int64_t e = i % unitElems;
    const unsigned long long key = keys[s];
    if (key >= units || (s > 0 && keys[s - 1] == key)) {
      continue;
    }
    T* target = dst + static_cast<std::int64_t>(key) * unitElems + e;
    T acc = *target;
    for (std::int64_t r = s; r < n && keys[r] == key; ++r) {
      acc = combineValues<T>(acc, updates[positions[r] * unitElems + e], reduction);
    }
    *target = acc;
  }
}

// The CPU's toInt64Vector for one element: integers as they are, floating-point values truncated through double.
template <typename I>
__device__ inline std::int64_t asInt64(I v) {
  if constexpr (std::is_integral_v<I>) {
    return static_cast<std::int64_t>(v);
  } else {
    return static_cast<std::int64_t>(static_cast<double>(toAcc(v)));
  }
}

template <typename T, typename I>
__global__ void oneHotKernel(T* dst, const I* idx, const T* values, std::int64_t depth, std::int64_t inner,
                             std::int64_t n) {
  const T off = values[0];
  const T on = values[1];
  STRATA_GRID_STRIDE_LOOP(i, n) {
    const std::int64_t r = i % inner;
    const std::int64_t d = (i / inner) % depth;
    const std::int64_t o = i / (inner * depth);
    std::int64_t v = asInt64(idx[o * inner + r]);
    if (v < 0) {
      v += depth;
    }
    dst[i] = v == d ? on : off;
  }
}

// The indexer that gives, for each element of an index tensor, its data offset without the axis coordinate.
Indexer elementsBase(const Shape& indexShape, const Shape& dataShape, std::size_t axis, const char* op) {
  Strides strides = contiguousStrides(dataShape);
  strides[axis] = 0;
  return makeIndexer(indexShape, strides, op);
}

NdParams ndParams(const NdGeometry& g, const char* op) {
  STRATA_CHECK(g.k <= kMaxDims, "{} on CUDA takes index tuples of at most {} coordinates, got {}", op, kMaxDims, g.k);
  NdParams p;
  p.k = static_cast<int>(g.k);
  for (std::size_t j = 0; j < static_cast<std::size_t>(g.k); ++j) {
    p.dims[j] = g.dims[j];
    p.strides[j] = g.strides[j];
  }
  return p;
}

void scatterSorted(void* dst, const void* updates, const unsigned long long* keys, const long long* positions,
                   std::int64_t n, std::int64_t unitElems, unsigned long long units, DType dtype, Reduction reduction,
                   cudaStream_t stream) {
  const std::int64_t total = n * unitElems;
  if (total == 0) {
    return;
  }
  visitDeviceDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    scatterSortedKernel<T><<<blocksFor(total), kThreadsPerBlock, 0, stream>>>(
        static_cast<T*>(dst), static_cast<const T*>(updates), keys, positions, n, unitElems, units, reduction, total);
    STRATA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

IndexFlag::IndexFlag(Device device, cudaStream_t stream) : storage_(workspaceWords(1, device)), stream_(stream) {
  ptr_ = static_cast<unsigned long long*>(storage_.rawData());
  // All bits set: no bad position yet (atomicMin keeps the smallest).
  STRATA_CUDA_CHECK(cudaMemsetAsync(ptr_, 0xFF, sizeof(unsigned long long), stream));
}

std::int64_t IndexFlag::firstBad() const {
  unsigned long long host = 0;
  STRATA_CUDA_CHECK(cudaMemcpyAsync(&host, ptr_, sizeof(host), cudaMemcpyDeviceToHost, stream_));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return host == ~0ULL ? -1 : static_cast<std::int64_t>(host);
}

std::int64_t readIndex(const Tensor& indices, std::int64_t position, cudaStream_t stream) {
  STRATA_CHECK(position >= 0 && position < indices.numel(), "index position {} of a tensor of {} elements", position,
               indices.numel());
  const std::size_t size = dtypeSize(indices.dtype());
  STRATA_CHECK(indices.dtype() == DType::Int64 || indices.dtype() == DType::Int32,
               "indices must be int32 or int64, not {}", dtypeName(indices.dtype()));
  std::int64_t v64 = 0;
  std::int32_t v32 = 0;
  void* host = indices.dtype() == DType::Int64 ? static_cast<void*>(&v64) : static_cast<void*>(&v32);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(host, static_cast<const char*>(indices.rawData()) + position * size, size,
                                    cudaMemcpyDeviceToHost, stream));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  return indices.dtype() == DType::Int64 ? v64 : v32;
}

void sortPairs(const unsigned long long* keysIn, const long long* valuesIn, unsigned long long* keysOut,
               long long* valuesOut, std::int64_t n, unsigned long long maxKey, Device device, cudaStream_t stream) {
  if (n == 0) {
    return;
  }
  int endBit = 1;
  while (endBit < 64 && (maxKey >> endBit) != 0) {
    ++endBit;
  }
  std::size_t tempBytes = 0;
  STRATA_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(nullptr, tempBytes, keysIn, keysOut, valuesIn, valuesOut, n, 0, endBit, stream));
  // At least one byte: a null temp pointer would make the second call a size query that sorts nothing.
  const Tensor temp =
      Tensor::empty(TensorMeta{DType::UInt8, {static_cast<std::int64_t>(std::max<std::size_t>(tempBytes, 1))}},
                    MemoryCategory::Workspace, device);
  STRATA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.rawData(), tempBytes, keysIn, keysOut, valuesIn, valuesOut, n,
                                                    0, endBit, stream));
}

void gather(void* dst, const void* data, const void* indices, DType indexType, std::int64_t outer, std::int64_t dim,
            std::int64_t n, std::size_t innerBytes, unsigned long long* bad, cudaStream_t stream) {
  if (n == 0 || outer == 0 || innerBytes == 0) {
    return;
  }
  const std::size_t word = wordSizeFor({addressOf(dst), addressOf(data), innerBytes});
  const auto inner = static_cast<std::int64_t>(innerBytes / word);
  const std::int64_t total = outer * n * inner;
  visitIndexType(indexType, "Gather", [&](auto indexTag) {
    using I = decltype(indexTag);
    visitWord(word, [&](auto tag) {
      using T = decltype(tag);
      gatherKernel<T, I><<<blocksFor(total), kThreadsPerBlock, 0, stream>>>(
          static_cast<T*>(dst), static_cast<const T*>(data), static_cast<const I*>(indices), n, dim, inner, total, bad);
      STRATA_CUDA_CHECK_LAUNCH();
    });
  });
}

void checkIndices(const void* indices, DType indexType, std::int64_t n, std::int64_t dim, unsigned long long* bad,
                  cudaStream_t stream) {
  if (bad == nullptr || n == 0) {
    return;
  }
  visitIndexType(indexType, "index check", [&](auto indexTag) {
    using I = decltype(indexTag);
    checkIndicesKernel<I><<<blocksFor(n), kThreadsPerBlock, 0, stream>>>(static_cast<const I*>(indices), n, dim, bad);
    STRATA_CUDA_CHECK_LAUNCH();
  });
}

void gatherElements(void* dst, const void* data, const void* indices, DType indexType, const Shape& indexShape,
                    const Shape& dataShape, std::size_t axis, std::size_t elemSize, unsigned long long* bad,
                    cudaStream_t stream) {
  const std::int64_t n = numElements(indexShape);
  if (n == 0) {
    return;
  }
  const Indexer base = elementsBase(indexShape, dataShape, axis, "GatherElements");
  const std::int64_t axisStride = contiguousStrides(dataShape)[axis];
  visitIndexType(indexType, "GatherElements", [&](auto indexTag) {
    using I = decltype(indexTag);
    visitWord(elemSize, [&](auto tag) {
      using T = decltype(tag);
      gatherElementsKernel<T, I><<<blocksFor(n), kThreadsPerBlock, 0, stream>>>(
          static_cast<T*>(dst), static_cast<const T*>(data), static_cast<const I*>(indices), base, axisStride,
          dataShape[axis], n, bad);
      STRATA_CUDA_CHECK_LAUNCH();
    });
  });
}

void gatherND(void* dst, const void* data, const std::int64_t* indices, const NdGeometry& geometry,
              std::size_t elemSize, Device device, unsigned long long* bad, cudaStream_t stream) {
  const std::int64_t tuples = geometry.batch * geometry.tuples;
  if (tuples == 0) {
    return;
  }
  const NdParams params = ndParams(geometry, "GatherND");
  // Offsets first, so every tuple is validated even when the slices are empty (as the CPU does).
  const Tensor offsets = workspaceWords(tuples, device);
  auto* offsetData = static_cast<long long*>(offsets.rawData());
  ndOffsetsKernel<<<blocksFor(tuples), kThreadsPerBlock, 0, stream>>>(offsetData, indices, params, tuples, bad);
  STRATA_CUDA_CHECK_LAUNCH();
  const auto es = static_cast<std::int64_t>(elemSize);
  const std::int64_t sliceBytes = geometry.sliceElems * es;
  if (sliceBytes == 0) {
    return;
  }
  // Every offset is a multiple of the slice, so slices move as words.
  const std::size_t word = wordSizeFor({addressOf(dst), addressOf(data), static_cast<std::uintptr_t>(sliceBytes)});
  const auto w = static_cast<std::int64_t>(word);
  const std::int64_t sliceWords = sliceBytes / w;
  const std::int64_t total = tuples * sliceWords;
  visitWord(word, [&](auto tag) {
    using T = decltype(tag);
    gatherNDKernel<T><<<blocksFor(total), kThreadsPerBlock, 0, stream>>>(
        static_cast<T*>(dst), static_cast<const T*>(data), offsetData, geometry.tuples, geometry.batchElems * es / w,
        sliceWords, es, w, total);
    STRATA_CUDA_CHECK_LAUNCH();
  });
}

void scatterElements(void* dst, const void* updates, const void* indices, DType indexType, const Shape& indexShape,
                     const Shape& dataShape, std::size_t axis, DType dtype, Reduction reduction, Device device,
                     unsigned long long* bad, cudaStream_t stream) {
  const std::int64_t n = numElements(indexShape);
  if (n == 0) {
    return;
  }
  const Indexer base = elementsBase(indexShape, dataShape, axis, "ScatterElements");
  const std::int64_t axisStride = contiguousStrides(dataShape)[axis];
  const auto units = static_cast<unsigned long long>(numElements(dataShape));
  // Keys and positions, unsorted then sorted.
  const Tensor pairs = workspaceWords(4 * n, device);
  auto* keys = static_cast<unsigned long long*>(pairs.rawData());
  auto* positions = reinterpret_cast<long long*>(keys + n);
  auto* sortedKeys = keys + 2 * n;
  auto* sortedPositions = reinterpret_cast<long long*>(keys + 3 * n);
  visitIndexType(indexType, "ScatterElements", [&](auto indexTag) {
    using I = decltype(indexTag);
    elementKeysKernel<I><<<blocksFor(n), kThreadsPerBlock, 0, stream>>>(
        keys, positions, static_cast<const I*>(indices), base, axisStride, dataShape[axis], n, units, bad);
    STRATA_CUDA_CHECK_LAUNCH();
  });
  sortPairs(keys, positions, sortedKeys, sortedPositions, n, units, device, stream);
  scatterSorted(dst, updates, sortedKeys, sortedPositions, n, 1, units, dtype, reduction, stream);
}

void scatterND(void* dst, const void* updates, const std::int64_t* indices, const NdGeometry& geometry, DType dtype,
               Reduction reduction, Device device, unsigned long long* bad, cudaStream_t stream) {
  const std::int64_t tuples = geometry.batch * geometry.tuples;
  if (tuples == 0) {
    return;
  }
  const NdParams params = ndParams(geometry, "ScatterND");
  const auto units = static_cast<unsigned long long>(
      geometry.sliceElems > 0 ? geometry.batch * geometry.batchElems / geometry.sliceElems : 0);
  const Tensor pairs = workspaceWords(4 * tuples, device);
  auto* keys = static_cast<unsigned long long*>(pairs.rawData());
  auto* positions = reinterpret_cast<long long*>(keys + tuples);
  auto* sortedKeys = keys + 2 * tuples;
  auto* sortedPositions = reinterpret_cast<long long*>(keys + 3 * tuples);
  ndKeysKernel<<<blocksFor(tuples), kThreadsPerBlock, 0, stream>>>(keys, positions, indices, params, tuples,
                                                                   geometry.sliceElems, units, bad);
  STRATA_CUDA_CHECK_LAUNCH();
  if (units == 0) {
    return;
  }
  sortPairs(keys, positions, sortedKeys, sortedPositions, tuples, units, device, stream);
  scatterSorted(dst, updates, sortedKeys, sortedPositions, tuples, geometry.sliceElems, units, dtype, reduction,
                stream);
}

void oneHot(void* dst, const void* indices, DType indexType, const void* values, std::int64_t outer, std::int64_t depth,
            std::int64_t inner, std::size_t elemSize, cudaStream_t stream) {
  const std::int64_t n = outer * depth * inner;
  if (n == 0) {
    return;
  }
  visitDeviceDType(indexType, [&](auto indexTag) {
    using I = decltype(indexTag);
    visitWord(elemSize, [&](auto tag) {
      using T = decltype(tag);
      oneHotKernel<T, I><<<blocksFor(n), kThreadsPerBlock, 0, stream>>>(
          static_cast<T*>(dst), static_cast<const I*>(indices), static_cast<const T*>(values), depth, inner, n);
      STRATA_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace strata::cuda::dm
