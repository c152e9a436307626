// CUDA kernels behind GatherGrad and PadGrad (SliceGrad is a strided scatter from data_movement.cu); the op code is
// in data_movement_grad_ops.cpp. Both are deterministic: every output element is summed by one thread, in the
// order the CPU kernel sums it.

#include "data_movement_device.cuh"

namespace strata::cuda::dm {

namespace {

template <typename I>
__global__ void rowKeysKernel(unsigned long long* keys, long long* positions, const I* idx, std::int64_t n,
                              std::int64_t dim, unsigned long long* bad) {
  STRATA_GRID_STRIDE_LOOP(j, n) {
    const std::int64_t v = wrapIndex(static_cast<std::int64_t>(idx[j]), dim);
    if (v < 0) {
      recordBadIndex(bad, j);
    }
    // Bad indices sort after every row (key dim) and are never read.
    keys[j] = static_cast<unsigned long long>(v < 0 ? dim : v);
    positions[j] = j;
  }
}

// starts[r] = the first sorted position whose key is >= r, for r <= rows: row r's sources are
// [starts[r], starts[r + 1]).
__global__ void rowStartsKernel(long long* starts, const unsigned long long* sortedKeys, std::int64_t n,
                                std::int64_t rows) {
  STRATA_GRID_STRIDE_LOOP(r, rows + 1) {
    std::int64_t lo = 0;
    std::int64_t hi = n;
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      if (sortedKeys[mid] < static_cast<unsigned long long>(r)) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    starts[r] = lo;
  }
}

// dx [outer, dim, inner]: each element sums its rows of dy [outer, n, inner] in index order.
template <typename T>
__global__ void gatherGradKernel(T* dx, const T* dy, const long long* starts, const long long* sources, std::int64_t n,
                                 std::int64_t dim, std::int64_t inner, std::int64_t total) {
  using Acc = typename AccTypeOf<T>::type;
  STRATA_GRID_STRIDE_LOOP(i, total) {
    const std::int64_t c = i % inner;
    const std::int64_t row = (i / inner) % dim;
    const std::int64_t o = i / (inner * dim);
    const T* base = dy + o * n * inner + c;
    Acc acc = Acc(0);
    for (long long k = starts[row]; k < starts[row + 1]; ++k) {
      acc += toAcc(base[sources[k] * inner]);
    }
    dx[i] = fromAcc<T>(acc);
  }
}

// dst [outer, dim, inner] from src [outer, srcRows, inner]: each element sums the src rows that Pad copied from it,
// in increasing src row order: the begin padding, the row's own copy, the end padding.
template <typename T>
__global__ void padGradFoldKernel(T* dst, const T* src, std::int64_t srcRows, std::int64_t dim, std::int64_t inner,
                                  std::int64_t begin, PadKind mode, std::int64_t total) {
  using Acc = typename AccTypeOf<T>::type;
  const std::int64_t beginEnd = begin < 0 ? 0 : (begin < srcRows ? begin : srcRows);
  const std::int64_t endStart = begin + dim < 0 ? 0 : (begin + dim < srcRows ? begin + dim : srcRows);
  STRATA_GRID_STRIDE_LOOP(i, total) {
    const std::int64_t c = i % inner;
    const std::int64_t row = (i / inner) % dim;
    const std::int64_t o = i / (inner * dim);
    const T* s = src + o * srcRows * inner + c;
    Acc acc = Acc(0);
    if (mode != PadKind::Constant) {
      for (std::int64_t r = 0; r < beginEnd; ++r) {
        if (padSourceIndex(r, begin, dim, mode) == row) {
          acc += toAcc(s[r * inner]);
        }
      }
    }
    const std::int64_t own = row + begin;
    if (own >= 0 && own < srcRows) {
      acc += toAcc(s[own * inner]);
    }
    if (mode != PadKind::Constant) {
      for (std::int64_t r = endStart; r < srcRows; ++r) {
        if (padSourceIndex(r, begin, dim, mode) == row) {
          acc += toAcc(s[r * inner]);
        }
      }
    }
    dst[i] = fromAcc<T>(acc);
  }
}

}  // namespace

void gatherGrad(void* dx, const void* dy, const void* indices, DType indexType, DType dtype, std::int64_t outer,
                std::int64_t dim, std::int64_t n, std::int64_t inner, Device device, unsigned long long* bad,
                cudaStream_t stream) {
  const std::int64_t total = outer * dim * inner;
  if (n == 0) {
    if (total > 0) {
      STRATA_CUDA_CHECK(cudaMemsetAsync(dx, 0, static_cast<std::size_t>(total) * dtypeSize(dtype), stream));
    }
    return;
  }
  // Keys and positions, unsorted then sorted.
  const Tensor pairs = workspaceWords(4 * n, device);
  auto* keys = static_cast<unsigned long long*>(pairs.rawData());
  auto* positions = reinterpret_cast<long long*>(keys + n);
  auto* sortedKeys = keys + 2 * n;
  auto* sortedPositions = reinterpret_cast<long long*>(keys + 3 * n);
  visitIndexType(indexType, "GatherGrad", [&](auto indexTag) {
    using I = decltype(indexTag);
    rowKeysKernel<I>
        <<<blocksFor(n), kThreadsPerBlock, 0, stream>>>(keys, positions, static_cast<const I*>(indices), n, dim, bad);
    STRATA_CUDA_CHECK_LAUNCH();
  });
  if (total == 0) {
    return;
  }
  sortPairs(keys, positions, sortedKeys, sortedPositions, n, static_cast<unsigned long long>(dim), device, stream);
  const Tensor startsStorage = workspaceWords(dim + 1, device);
  auto* starts = static_cast<long long*>(startsStorage.rawData());
  rowStartsKernel<<<blocksFor(dim + 1), kThreadsPerBlock, 0, stream>>>(starts, sortedKeys, n, dim);
  STRATA_CUDA_CHECK_LAUNCH();
  visitDeviceFloat(dtype, "GatherGrad", [&](auto tag) {
    using T = decltype(tag);
    gatherGradKernel<T><<<blocksFor(total), kThreadsPerBlock, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), starts, sortedPositions, n, dim, inner, total);
    STRATA_CUDA_CHECK_LAUNCH();
  });
}

void padGradFold(void* dst, const void* src, DType dtype, std::int64_t outer, std::int64_t srcRows, std::int64_t dim,
                 std::int64_t inner, std::int64_t begin, PadKind mode, cudaStream_t stream) {
  const std::int64_t total = outer * dim * inner;
  if (total == 0) {
    return;
  }
  visitDeviceFloat(dtype, "PadGrad", [&](auto tag) {
    using T = decltype(tag);
    padGradFoldKernel<T><<<blocksFor(total), kThreadsPerBlock, 0, stream>>>(
        static_cast<T*>(dst), static_cast<const T*>(src), srcRows, dim, inner, begin, mode, total);
    STRATA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace strata::cuda::dm
