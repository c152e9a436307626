#pragma once

// Device-side helpers shared by data_movement*.cu (not for host-only sources).

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "data_movement.h"
#include "kernel_utils.cuh"

namespace strata::cuda::dm {

// Data movement never looks at values: elements move as unsigned words of their size, and runs that are aligned
// move as wider words (up to 16 bytes).
template <typename Fn>
void visitWord(std::size_t bytes, Fn&& fn) {
  switch (bytes) {
    case 1:
      fn(std::uint8_t{});
      return;
    case 2:
      fn(std::uint16_t{});
      return;
    case 4:
      fn(std::uint32_t{});
      return;
    case 8:
      fn(std::uint64_t{});
      return;
    case 16:
      fn(uint4{});
      return;
    default:
      fail("no CUDA copy kernel for {}-byte elements", bytes);
  }
}

// The widest word (a power of two up to maxWord bytes) that divides every value (byte counts and addresses).
inline std::size_t wordSizeFor(std::initializer_list<std::uintptr_t> values, std::size_t maxWord = 16) {
  std::size_t word = maxWord;
  for (std::uintptr_t v : values) {
    while (word > 1 && v % word != 0) {
      word /= 2;
    }
  }
  return word;
}

inline std::uintptr_t addressOf(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p);
}

// An indexer over `shape` with the given strides; the rank must not exceed kMaxDims.
inline Indexer makeIndexer(const Shape& shape, const Strides& strides, const char* what) {
  STRATA_CHECK(shape.size() <= static_cast<std::size_t>(kMaxDims),
               "{} on CUDA takes at most {} dimensions after merging contiguous ones, got {} (shape {})", what,
               kMaxDims, shape.size(), shapeToString(shape));
  Indexer indexer;
  indexer.rank = static_cast<int>(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    indexer.sizes[d] = shape[d];
    indexer.strides[d] = strides[d];
  }
  return indexer;
}

// Small fixed-size arrays passed to kernels by value.
struct Dims {
  int rank = 0;
  std::int64_t v[kMaxDims] = {};
};

inline Dims makeDims(const std::vector<std::int64_t>& values, const char* what) {
  STRATA_CHECK(values.size() <= static_cast<std::size_t>(kMaxDims), "{} on CUDA takes at most {} dimensions, got {}",
               what, kMaxDims, values.size());
  Dims dims;
  dims.rank = static_cast<int>(values.size());
  for (std::size_t d = 0; d < values.size(); ++d) {
    dims.v[d] = values[d];
  }
  return dims;
}

// Records the flat position of an out-of-range index (the smallest one wins).
__device__ inline void recordBadIndex(unsigned long long* bad, std::int64_t position) {
  if (bad != nullptr) {
    atomicMin(bad, static_cast<unsigned long long>(position));
  }
}

// An index wrapped into [0, dim), or -1 when it is outside [-dim, dim).
__device__ inline std::int64_t wrapIndex(std::int64_t v, std::int64_t dim) {
  if (v < -dim || v >= dim) {
    return -1;
  }
  return v < 0 ? v + dim : v;
}

// The CPU's slice_pad::padSource: the input index that output index o of an axis reads, or -1 for the constant.
__host__ __device__ inline std::int64_t padSourceIndex(std::int64_t o, std::int64_t begin, std::int64_t dim,
                                                       PadKind mode) {
  const std::int64_t i = o - begin;
  if (i >= 0 && i < dim) {
    return i;
  }
  switch (mode) {
    case PadKind::Constant:
      return -1;
    case PadKind::Edge:
      return i < 0 ? 0 : dim - 1;
    case PadKind::Wrap:
      return ((i % dim) + dim) % dim;
    case PadKind::Reflect: {
      if (dim == 1) {
        return 0;
      }
      const std::int64_t period = 2 * (dim - 1);
      const std::int64_t m = ((i % period) + period) % period;
      return m < dim ? m : period - m;
    }
  }
  return -1;
}

// Index types of Gather, GatherElements, ScatterElements and GatherGrad.
template <typename Fn>
void visitIndexType(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::Int64:
      fn(std::int64_t{});
      return;
    case DType::Int32:
      fn(std::int32_t{});
      return;
    default:
      fail("{}: indices must be int32 or int64, not {}", op, dtypeName(dtype));
  }
}

// Stably sorts n (key, value) pairs by key (keys in [0, maxKey]) with cub's radix sort, so equal keys keep their
// input order; temporary storage comes from `device`'s caching allocator. Defined in data_movement_indexing.cu.
void sortPairs(const unsigned long long* keysIn, const long long* valuesIn, unsigned long long* keysOut,
               long long* valuesOut, std::int64_t n, unsigned long long maxKey, Device device, cudaStream_t stream);

// A device buffer of `count` 8-byte words from the caching allocator.
inline Tensor workspaceWords(std::int64_t count, Device device) {
  return Tensor::empty(TensorMeta{DType::Int64, {count}}, MemoryCategory::Workspace, device);
}

}  // namespace strata::cuda::dm
