#pragma once

// Building blocks shared by the reduction-family CUDA kernels (reduction.cu, softmax.cu, losses.cu,
// layer_norm.cu, reduction_grad.cu): dtype conversions, warp/row-group reductions, and a generic deterministic
// reduction engine.
//
// Note [CUDA reduction engine]: a reduction maps every output index o to `reduceCount` input elements. The
// engine runs one of two kernels:
//  - rows (the innermost input axis is reduced): a group of blockDim.x threads (a multiple of 32) per output
//    strides over the reduced elements, then a warp-shuffle + shared-memory tree combines the group;
//  - columns (the innermost axis is kept): 32 neighbouring outputs per block (coalesced reads), blockDim.y
//    threads per output split the reduced range, then the partials are combined in order.
// When there are too few outputs to fill the device, the reduced range is also split over gridDim.y; each split
// writes a partial accumulator and a last kernel combines them in split order. Every combination order depends
// only on the shapes, so results are deterministic (no atomics).
// An Op provides: `using Acc` (trivially copyable, size a multiple of 4 bytes), `Acc init() const`,
// `Acc map(std::int64_t offset, std::int64_t o, std::int64_t r) const` (offset: the element's input offset, o: the
// output index, r: the index within the reduced range), `Acc combine(Acc, Acc) const`, and
// `void finish(Acc, std::int64_t o) const` (writes output o).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernel_utils.cuh"

namespace strata::cuda {

// Per-file registration, called from registerReductionKernels / registerReductionGradKernels (cuda_ops.h).
void registerSoftmaxKernels(OpRegistry& registry);      // Softmax, LogSoftmax
void registerSoftmaxGradKernels(OpRegistry& registry);  // SoftmaxGrad, LogSoftmaxGrad
void registerLayerNormKernels(OpRegistry& registry);    // LayerNormalization
void registerLossKernels(OpRegistry& registry);         // SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss
void registerLossGradKernels(OpRegistry& registry);     // their gradients

namespace reduce {

// ---- Types and conversions ----

template <typename T>
inline constexpr bool kIsDevice16 = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// The type transcendental math runs in: float for float and the 16-bit floats, double otherwise (double and the
// integers, which the CPU computes in double).
template <typename T>
using MathTypeOf = std::conditional_t<std::is_same_v<T, float> || kIsDevice16<T>, float, double>;

// Converts between arithmetic types and the 16-bit floats (through float).
template <typename To, typename From>
__host__ __device__ __forceinline__ To cvt(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (kIsDevice16<From>) {
    return cvt<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

template <typename A>
__host__ __device__ __forceinline__ bool isNan(A v) {
  if constexpr (std::is_floating_point_v<A>) {
    return v != v;
  } else {
    return false;
  }
}

__host__ __device__ __forceinline__ float dExp(float v) {
  return expf(v);
}
__host__ __device__ __forceinline__ double dExp(double v) {
  return ::exp(v);
}
__host__ __device__ __forceinline__ float dLog(float v) {
  return logf(v);
}
__host__ __device__ __forceinline__ double dLog(double v) {
  return ::log(v);
}
__host__ __device__ __forceinline__ float dSqrt(float v) {
  return sqrtf(v);
}
__host__ __device__ __forceinline__ double dSqrt(double v) {
  return ::sqrt(v);
}
// Maximum ignoring NaN (like std::max(running, x) from -inf on the CPU).
__host__ __device__ __forceinline__ float dMaxNum(float a, float b) {
  return fmaxf(a, b);
}
__host__ __device__ __forceinline__ double dMaxNum(double a, double b) {
  return ::fmax(a, b);
}
__host__ __device__ __forceinline__ bool dIsFinite(float v) {
  return isfinite(v);
}
__host__ __device__ __forceinline__ bool dIsFinite(double v) {
  return isfinite(v);
}

// Element i of a floating tensor of any float dtype, as A (for small per-row inputs whose dtype may differ from
// the main input's).
template <typename A>
__device__ __forceinline__ A loadAs(const void* p, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::Float64:
      return static_cast<A>(static_cast<const double*>(p)[i]);
    case DType::Float16:
      return static_cast<A>(__half2float(static_cast<const __half*>(p)[i]));
    case DType::BFloat16:
      return static_cast<A>(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]));
    default:
      return static_cast<A>(static_cast<const float*>(p)[i]);
  }
}

// ---- Warp and row-group reductions ----

// Shuffles any trivially copyable value word by word.
template <typename A>
__device__ __forceinline__ A shflXor(A v, int laneMask) {
  static_assert(sizeof(A) % 4 == 0 && std::is_trivially_copyable_v<A>, "shuffled values are whole 32-bit words");
  constexpr int kWords = static_cast<int>(sizeof(A) / 4);
  unsigned words[kWords];
  memcpy(words, &v, sizeof(A));
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    words[w] = __shfl_xor_sync(0xffffffffu, words[w], laneMask);
  }
  A out;
  memcpy(&out, words, sizeof(A));
  return out;
}

template <typename A>
__device__ __forceinline__ A shflFromLane0(A v) {
  constexpr int kWords = static_cast<int>(sizeof(A) / 4);
  unsigned words[kWords];
  memcpy(words, &v, sizeof(A));
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    words[w] = __shfl_sync(0xffffffffu, words[w], 0);
  }
  A out;
  memcpy(&out, words, sizeof(A));
  return out;
}

// Combines v over the 32 lanes of a warp; every lane gets lane 0's result (so lanes agree bit for bit even when
// `combine` is not symmetric, e.g. max of +0 and -0). All 32 lanes must call it.
template <typename A, typename Combine>
__device__ __forceinline__ A warpAllReduce(A v, Combine combine) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) {
    v = combine(v, shflXor(v, mask));
  }
  return shflFromLane0(v);
}

// Combines v over the blockDim.x threads of row threadIdx.y of the block (blockDim.x a multiple of 32, at most
// 32 warps per block); every thread of the row gets the result. Every thread of the block must call it.
template <typename A, typename Combine>
__device__ __forceinline__ A groupAllReduce(A v, Combine combine) {
  v = warpAllReduce(v, combine);
  const int warps = static_cast<int>(blockDim.x / 32);
  if (warps == 1) {
    return v;
  }
  __shared__ __align__(16) unsigned char raw[32 * sizeof(A)];
  A* partial = reinterpret_cast<A*>(raw);
  A* rowPartial = partial + threadIdx.y * warps;
  if ((threadIdx.x & 31) == 0) {
    rowPartial[threadIdx.x / 32] = v;
  }
  __syncthreads();
  A result = rowPartial[0];
  for (int w = 1; w < warps; ++w) {
    result = combine(result, rowPartial[w]);
  }
  __syncthreads();  // the buffer may be reused by the next call
  return result;
}

template <typename A>
struct SumCombine {
  __device__ A operator()(A a, A b) const { return a + b; }
};

template <typename A>
struct MaxNumCombine {
  __device__ A operator()(A a, A b) const { return dMaxNum(a, b); }
};

// Launch shape for kernels that give each row of `len` elements a group of blockDim.x threads and pack
// blockDim.y rows per block; the kernel loops over rows with a block-uniform stride of gridDim.x * blockDim.y.
struct RowLaunch {
  dim3 block;
  unsigned grid = 1;
};

inline RowLaunch rowLaunch(std::int64_t rows, std::int64_t len) {
  unsigned group = 32;
  if (len > 4096) {
    group = 512;
  } else if (len > 1024) {
    group = 256;
  } else if (len > 256) {
    group = 128;
  } else if (len > 64) {
    group = 64;
  }
  const unsigned perBlock = group >= 256 ? 1 : 256 / group;
  RowLaunch launch;
  launch.block = dim3(group, perBlock);
  launch.grid = blocksFor(rows, static_cast<int>(perBlock));
  return launch;
}

// Block-uniform loop over the rows of a RowLaunch; `row` is this thread's row, which may be past the end (then
// the thread must still take part in group reductions).
#define STRATA_ROW_LOOP(rowBase, rows)                                                              \
  for (std::int64_t rowBase = static_cast<std::int64_t>(blockIdx.x) * blockDim.y; rowBase < (rows); \
       rowBase += static_cast<std::int64_t>(gridDim.x) * blockDim.y)

// ---- The reduction engine (Note [CUDA reduction engine]) ----

struct ReduceGeometry {
  std::int64_t outCount = 0;
  std::int64_t reduceCount = 1;
  Indexer kept;     // output index -> input offset
  Indexer reduced;  // reduced index -> input offset, relative to the output's
  bool innerReduced = true;
};

// Indexer::offset without the division for the common ranks (linear is always in range).
__host__ __device__ __forceinline__ std::int64_t offsetOf(const Indexer& indexer, std::int64_t linear) {
  if (indexer.rank == 0) {
    return 0;
  }
  if (indexer.rank == 1) {
    return linear * indexer.strides[0];
  }
  return indexer.offset(linear);
}

constexpr int kColumnThreads = 32;  // outputs per block of the column kernel
constexpr int kColumnRows = 8;      // threads per output of the column kernel

template <typename Op>
__global__ void reduceRowsKernel(Op op, ReduceGeometry g, std::int64_t chunk, int splits, typename Op::Acc* partial) {
  using Acc = typename Op::Acc;
  const int split = static_cast<int>(blockIdx.y);
  const std::int64_t rBegin = split * chunk;
  const std::int64_t rEnd = rBegin + chunk < g.reduceCount ? rBegin + chunk : g.reduceCount;
  STRATA_ROW_LOOP(rowBase, g.outCount) {
    const std::int64_t o = rowBase + threadIdx.y;
    Acc acc = op.init();
    if (o < g.outCount) {
      const std::int64_t base = offsetOf(g.kept, o);
      for (std::int64_t r = rBegin + threadIdx.x; r < rEnd; r += blockDim.x) {
        acc = op.combine(acc, op.map(base + offsetOf(g.reduced, r), o, r));
      }
    }
    acc = groupAllReduce(acc, [&op](Acc a, Acc b) { return op.combine(a, b); });
    if (o < g.outCount && threadIdx.x == 0) {
      if (splits == 1) {
        op.finish(acc, o);
      } else {
        partial[o * splits + split] = acc;
      }
    }
  }
}

template <typename Op>
__global__ void reduceColumnsKernel(Op op, ReduceGeometry g, std::int64_t chunk, int splits,
                                    typename Op::Acc* partial) {
  using Acc = typename Op::Acc;
  __shared__ __align__(16) unsigned char raw[kColumnThreads * kColumnRows * sizeof(Acc)];
  Acc* tile = reinterpret_cast<Acc*>(raw);
  const int split = static_cast<int>(blockIdx.y);
  const std::int64_t rBegin = split * chunk;
  const std::int64_t rEnd = rBegin + chunk < g.reduceCount ? rBegin + chunk : g.reduceCount;
  for (std::int64_t colBase = static_cast<std::int64_t>(blockIdx.x) * kColumnThreads; colBase < g.outCount;
       colBase += static_cast<std::int64_t>(gridDim.x) * kColumnThreads) {
    const std::int64_t o = colBase + threadIdx.x;
    Acc acc = op.init();
    if (o < g.outCount) {
      const std::int64_t base = offsetOf(g.kept, o);
      for (std::int64_t r = rBegin + threadIdx.y; r < rEnd; r += kColumnRows) {
        acc = op.combine(acc, op.map(base + offsetOf(g.reduced, r), o, r));
      }
    }
    tile[threadIdx.y * kColumnThreads + threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && o < g.outCount) {
      Acc total = tile[threadIdx.x];
      for (int y = 1; y < kColumnRows; ++y) {
        total = op.combine(total, tile[y * kColumnThreads + threadIdx.x]);
      }
      if (splits == 1) {
        op.finish(total, o);
      } else {
        partial[o * splits + split] = total;
      }
    }
    __syncthreads();
  }
}

template <typename Op>
__global__ void reduceSplitsKernel(Op op, std::int64_t outCount, int splits, const typename Op::Acc* partial) {
  STRATA_GRID_STRIDE_LOOP(o, outCount) {
    typename Op::Acc acc = partial[o * splits];
    for (int s = 1; s < splits; ++s) {
      acc = op.combine(acc, partial[o * splits + s]);
    }
    op.finish(acc, o);
  }
}

// How launchReduce runs a geometry: the block shape, and the reduced range cut into `splits` chunks of `chunk`.
struct ReducePlan {
  dim3 block;
  dim3 grid;
  std::int64_t chunk = 0;
  int splits = 1;
};

inline ReducePlan planReduce(const ReduceGeometry& g) {
  ReducePlan plan;
  std::int64_t outputsPerBlock = 0;
  std::int64_t reducersPerOutput = 0;
  if (g.innerReduced) {
    plan.block = rowLaunch(g.outCount, g.reduceCount).block;
    outputsPerBlock = plan.block.y;
    reducersPerOutput = plan.block.x;
  } else {
    plan.block = dim3(kColumnThreads, kColumnRows);
    outputsPerBlock = kColumnThreads;
    reducersPerOutput = kColumnRows;
  }
  const std::int64_t blocksNeeded = std::max<std::int64_t>(1, (g.outCount + outputsPerBlock - 1) / outputsPerBlock);
  // Split the reduced range when the outputs alone leave the device idle, keeping >= 32 elements per thread.
  constexpr std::int64_t kTargetBlocks = 1024;
  constexpr std::int64_t kMinPerThread = 32;
  std::int64_t splits = 1;
  if (blocksNeeded < kTargetBlocks && g.reduceCount > reducersPerOutput * kMinPerThread) {
    const std::int64_t byDevice = (kTargetBlocks + blocksNeeded - 1) / blocksNeeded;
    const std::int64_t byWork = g.reduceCount / (reducersPerOutput * kMinPerThread);
    splits = std::max<std::int64_t>(1, std::min<std::int64_t>({byDevice, byWork, 65535}));
  }
  plan.chunk = (g.reduceCount + splits - 1) / splits;
  if (plan.chunk > 0) {
    splits = (g.reduceCount + plan.chunk - 1) / plan.chunk;  // no empty trailing split
  }
  plan.splits = static_cast<int>(std::max<std::int64_t>(splits, 1));
  constexpr std::int64_t kMaxGridX = 65535LL * 8;
  plan.grid = dim3(static_cast<unsigned>(std::min(blocksNeeded, kMaxGridX)), static_cast<unsigned>(plan.splits));
  return plan;
}

// Runs op over the geometry on `stream`; partial accumulators (when the range is split) live in a workspace
// buffer on `device`.
template <typename Op>
void launchReduce(const Op& op, const ReduceGeometry& g, Device device, cudaStream_t stream) {
  using Acc = typename Op::Acc;
  if (g.outCount == 0) {
    return;
  }
  const ReducePlan plan = planReduce(g);
  Tensor workspace;
  Acc* partial = nullptr;
  if (plan.splits > 1) {
    const auto bytes = static_cast<std::int64_t>(sizeof(Acc)) * g.outCount * plan.splits;
    workspace = Tensor::empty(TensorMeta{DType::UInt8, Shape{bytes}}, MemoryCategory::Workspace, device);
    partial = static_cast<Acc*>(workspace.rawData());
  }
  if (g.innerReduced) {
    reduceRowsKernel<Op><<<plan.grid, plan.block, 0, stream>>>(op, g, plan.chunk, plan.splits, partial);
  } else {
    reduceColumnsKernel<Op><<<plan.grid, plan.block, 0, stream>>>(op, g, plan.chunk, plan.splits, partial);
  }
  STRATA_CUDA_CHECK_LAUNCH();
  if (plan.splits > 1) {
    reduceSplitsKernel<Op>
        <<<blocksFor(g.outCount), kThreadsPerBlock, 0, stream>>>(op, g.outCount, plan.splits, partial);
    STRATA_CUDA_CHECK_LAUNCH();
  }
}

// A geometry that reduces `count` contiguous elements into one output (the op reads whatever it needs from r).
inline ReduceGeometry flatGeometry(std::int64_t count) {
  ReduceGeometry g;
  g.outCount = 1;
  g.reduceCount = count;
  g.reduced.rank = 1;
  g.reduced.sizes[0] = count;
  g.reduced.strides[0] = 1;
  g.innerReduced = true;
  return g;
}

// ---- Small helpers ----

template <typename T>
__global__ void gatherKernel(const T* src, Indexer indexer, T* dst, std::int64_t n) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    dst[i] = src[indexer.offset(i)];
  }
}

// t broadcast to `shape` as a contiguous device buffer: t's own data when it already has that many elements,
// else a copy in `storage` (workspace).
template <typename T>
const T* expandTo(const Tensor& t, const Shape& shape, Tensor& storage, cudaStream_t stream) {
  const std::int64_t n = numElements(shape);
  if (t.numel() == n) {
    return t.data<T>();
  }
  storage = Tensor::empty(TensorMeta{t.dtype(), shape}, MemoryCategory::Workspace, t.device());
  if (n > 0) {
    gatherKernel<T><<<blocksFor(n), kThreadsPerBlock, 0, stream>>>(t.data<T>(), broadcastIndexer(t.shape(), shape),
                                                                   storage.data<T>(), n);
    STRATA_CUDA_CHECK_LAUNCH();
  }
  return storage.data<T>();
}

// (Log)softmax over the middle axis of an [outer, axis, inner] view of a float tensor of `dtype` (defined in
// softmax.cu; the losses use it too).
void launchSoftmax(DType dtype, const void* src, void* dst, std::int64_t outer, std::int64_t axis, std::int64_t inner,
                   bool logSoftmax, cudaStream_t stream);

}  // namespace reduce

}  // namespace strata::cuda
