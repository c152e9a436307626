// Shape-only CPU ops (Reshape, Flatten, Squeeze, Unsqueeze, Shape, Size), constant producers (Constant,
// ConstantOfShape, Range) and the helpers every shape / data-movement op shares. The data movers proper live in
// data_movement_ops.cpp and data_movement_indexing.cpp.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>

#ifdef __AVX__
#include <immintrin.h>
#endif

#include "cpu_ops.h"
#include "data_movement_plan.h"
#include "shape_ops_common.h"
#include "strata/thread_pool.h"
#include "strided_axes.h"

#include <fmt/format.h>

namespace strata::cpu {

namespace shape_detail {

namespace {

template <typename T>
double asDouble(T value) {
  return static_cast<double>(value);
}
double asDouble(Half value) {
  return halfToFloat(value.bits);
}
double asDouble(BFloat16Bits value) {
  return bfloat16ToFloat(value.bits);
}

// Moves `count` elements of E bytes (E == 0: elemSize bytes) between a strided run and a contiguous one: from the
// strided `src` into contiguous `dst` (Scatter false), or from contiguous `src` into the strided `dst` (Scatter true).
template <bool Scatter, std::size_t E>
void moveRowT(char* dst, const char* src, std::int64_t count, std::int64_t stride, std::size_t elemSize) {
  const std::size_t es = E != 0 ? E : elemSize;
  const std::ptrdiff_t step = static_cast<std::ptrdiff_t>(stride) * static_cast<std::ptrdiff_t>(es);
  for (std::int64_t i = 0; i < count; ++i) {
    std::memcpy(dst, src, es);
    dst += Scatter ? step : static_cast<std::ptrdiff_t>(es);
    src += Scatter ? static_cast<std::ptrdiff_t>(es) : step;
  }
}

template <bool Scatter>
void moveRow(char* dst, const char* src, std::int64_t count, std::int64_t stride, std::size_t elemSize) {
  if (stride == 1) {
    std::memcpy(dst, src, static_cast<std::size_t>(count) * elemSize);
    return;
  }
  switch (elemSize) {
    case 1:
      moveRowT<Scatter, 1>(dst, src, count, stride, elemSize);
      break;
    case 2:
      moveRowT<Scatter, 2>(dst, src, count, stride, elemSize);
      break;
    case 4:
      moveRowT<Scatter, 4>(dst, src, count, stride, elemSize);
      break;
    case 8:
      moveRowT<Scatter, 8>(dst, src, count, stride, elemSize);
      break;
    default:
      moveRowT<Scatter, 0>(dst, src, count, stride, elemSize);
      break;
  }
}

// stridedCopy (Scatter false) and stridedScatter (true): `strides` are the strided side's.
template <bool Scatter>
void moveStrided(char* dst, const char* src, const Shape& shape, const std::vector<std::int64_t>& stridedSide,
                 std::size_t elemSize) {
  Shape dims;
  std::vector<std::int64_t> strides;
  if (!mergeStridedAxes(shape, stridedSide, dims, strides))
    return;
  if (dims.empty()) {
    std::memcpy(dst, src, elemSize);
    return;
  }
  const std::size_t outer = dims.size() - 1;
  const std::int64_t n = dims.back();
  const std::int64_t inner = strides.back();
  const std::size_t rowBytes = static_cast<std::size_t>(n) * elemSize;
  std::int64_t rows = 1;
  for (std::size_t k = 0; k < outer; ++k)
    rows *= dims[k];
  if (rows == 1 && inner == 1) {
    copyBytes(dst, src, rowBytes);
    return;
  }
  const std::int64_t grain = std::max<std::int64_t>(1, kParallelBytes / static_cast<std::int64_t>(rowBytes));
  const auto es = static_cast<std::ptrdiff_t>(elemSize);
  parallelFor(0, rows, grain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<std::int64_t> idx(outer, 0);
    std::int64_t rem = begin;
    std::int64_t offset = 0;
    for (std::size_t k = outer; k-- > 0;) {
      idx[k] = rem % dims[k];
      rem /= dims[k];
      offset += idx[k] * strides[k];
    }
    for (std::int64_t row = begin; row < end; ++row) {
      const std::size_t contiguous = static_cast<std::size_t>(row) * rowBytes;
      const std::ptrdiff_t strided = static_cast<std::ptrdiff_t>(offset) * es;
      if constexpr (Scatter) {
        moveRow<true>(dst + strided, src + contiguous, n, inner, elemSize);
      } else {
        moveRow<false>(dst + contiguous, src + strided, n, inner, elemSize);
      }
      for (std::size_t k = outer; k-- > 0;) {
        offset += strides[k];
        if (++idx[k] < dims[k])
          break;
        offset -= strides[k] * dims[k];
        idx[k] = 0;
      }
    }
  });
}

// Transposes one tile: dst[ia * dstStrideA + ib] = src[ib * srcStrideB + ia] for ia in [a0, a1), ib in [b0, b1).
template <std::size_t E>
void copyTileT(char* dst, const char* src, std::int64_t a0, std::int64_t a1, std::int64_t b0, std::int64_t b1,
               std::int64_t dstStrideA, std::int64_t srcStrideB, std::size_t elemSize) {
  const std::size_t es = E != 0 ? E : elemSize;
  for (std::int64_t ia = a0; ia < a1; ++ia) {
    char* d = dst + static_cast<std::size_t>(ia * dstStrideA + b0) * es;
    const char* s = src + static_cast<std::size_t>(b0 * srcStrideB + ia) * es;
    const std::size_t step = static_cast<std::size_t>(srcStrideB) * es;
    for (std::int64_t ib = b0; ib < b1; ++ib) {
      std::memcpy(d, s, es);
      d += es;
      s += step;
    }
  }
}

#ifdef __AVX__
// 8x8 transpose of 4-byte elements in registers: dst row r = src column r.
void transpose8x8(const float* src, std::int64_t srcStride, float* dst, std::int64_t dstStride) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i)
    r[i] = _mm256_loadu_ps(src + i * srcStride);
  __m256 t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m256 u[8];
  for (int i = 0; i < 2; ++i) {
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * dstStride, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * dstStride, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
  }
}

// 4-byte tiles: full 8x8 blocks in AVX registers, ragged edges element by element.
void copyTile4(char* dst, const char* src, std::int64_t a0, std::int64_t a1, std::int64_t b0, std::int64_t b1,
               std::int64_t dstStrideA, std::int64_t srcStrideB) {
  const std::int64_t aFull = a0 + (a1 - a0) / 8 * 8;
  const std::int64_t bFull = b0 + (b1 - b0) / 8 * 8;
  const auto* s = reinterpret_cast<const float*>(src);
  auto* d = reinterpret_cast<float*>(dst);
  for (std::int64_t ia = a0; ia < aFull; ia += 8) {
    for (std::int64_t ib = b0; ib < bFull; ib += 8) {
      transpose8x8(s + ib * srcStrideB + ia, srcStrideB, d + ia * dstStrideA + ib, dstStrideA);
    }
  }
  copyTileT<4>(dst, src, aFull, a1, b0, b1, dstStrideA, srcStrideB, 4);
  copyTileT<4>(dst, src, a0, aFull, bFull, b1, dstStrideA, srcStrideB, 4);
}
#endif

void copyTile(char* dst, const char* src, std::int64_t a0, std::int64_t a1, std::int64_t b0, std::int64_t b1,
              std::int64_t dstStrideA, std::int64_t srcStrideB, std::size_t elemSize) {
  switch (elemSize) {
    case 1:
      copyTileT<1>(dst, src, a0, a1, b0, b1, dstStrideA, srcStrideB, elemSize);
      break;
    case 2:
      copyTileT<2>(dst, src, a0, a1, b0, b1, dstStrideA, srcStrideB, elemSize);
      break;
#ifdef __AVX__
    case 4:
      copyTile4(dst, src, a0, a1, b0, b1, dstStrideA, srcStrideB);
      break;
#else
    case 4:
      copyTileT<4>(dst, src, a0, a1, b0, b1, dstStrideA, srcStrideB, elemSize);
      break;
#endif
    case 8:
      copyTileT<8>(dst, src, a0, a1, b0, b1, dstStrideA, srcStrideB, elemSize);
      break;
    default:
      copyTileT<0>(dst, src, a0, a1, b0, b1, dstStrideA, srcStrideB, elemSize);
      break;
  }
}

}  // namespace

void addOp(OpRegistry& registry, const std::string& type, ShapeFn infer, ComputeFactory factory) {
  registry.addSchema(OpSchema{type, std::move(infer), true});
  registry.addKernel(type, DeviceType::CPU, [factory = std::move(factory)](const KernelInit& init) {
    return makeFunctionKernel(factory(init));
  });
}

std::vector<std::int64_t> toInt64Vector(const Tensor& tensor) {
  const std::int64_t n = tensor.numel();
  std::vector<std::int64_t> values(static_cast<std::size_t>(n));
  if (n == 0)
    return values;
  if (tensor.dtype() == DType::Int64) {
    std::memcpy(values.data(), tensor.rawData(), static_cast<std::size_t>(n) * sizeof(std::int64_t));
    return values;
  }
  visitDType(tensor.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* data = tensor.data<T>();
    for (std::int64_t i = 0; i < n; ++i) {
      // Converting a value outside int64's range is undefined behaviour (found by onnx_importer_fuzzer): refuse it.
      const double value = asDouble(data[i]);
      STRATA_CHECK(std::isfinite(value) && value >= -0x1p63 && value < 0x1p63,
                   "value {} at index {} of a {} tensor read as integers (a shape, axes or indices) is outside int64's "
                   "range",
                   value, i, dtypeName(tensor.dtype()));
      values[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(value);
    }
  });
  return values;
}

double elementAsDouble(const Tensor& tensor, std::int64_t index) {
  STRATA_CHECK(index < tensor.numel(), "element {} of a tensor of shape {} does not exist", index,
               shapeToString(tensor.shape()));
  return visitDType(tensor.dtype(), [&](auto tag) {
    using T = decltype(tag);
    return asDouble(tensor.data<T>()[index]);
  });
}

std::string listToString(const std::vector<std::int64_t>& values) {
  return fmt::format("[{}]", fmt::join(values, ", "));
}

void storeFromDouble(DType dtype, void* dst, double value) {
  visitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    T v{};
    if constexpr (std::is_same_v<T, Half>) {
      v.bits = floatToHalf(static_cast<float>(value));
    } else if constexpr (std::is_same_v<T, BFloat16Bits>) {
      v.bits = floatToBFloat16(static_cast<float>(value));
    } else if constexpr (std::is_same_v<T, bool>) {
      v = value != 0.0;
    } else {
      v = static_cast<T>(value);
    }
    std::memcpy(dst, &v, sizeof(T));
  });
}

void copyBytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src)
    return;
  constexpr auto kChunk = static_cast<std::size_t>(kParallelBytes);
  if (bytes < 2 * kChunk) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const auto chunks = static_cast<std::int64_t>((bytes + kChunk - 1) / kChunk);
  parallelFor(0, chunks, 1, [&](std::int64_t begin, std::int64_t end) {
    const std::size_t from = static_cast<std::size_t>(begin) * kChunk;
    const std::size_t to = std::min(bytes, static_cast<std::size_t>(end) * kChunk);
    std::memcpy(static_cast<char*>(dst) + from, static_cast<const char*>(src) + from, to - from);
  });
}

void zeroBytes(void* dst, std::size_t bytes) {
  constexpr auto kChunk = static_cast<std::size_t>(kParallelBytes);
  if (bytes < 2 * kChunk) {
    std::memset(dst, 0, bytes);
    return;
  }
  const auto chunks = static_cast<std::int64_t>((bytes + kChunk - 1) / kChunk);
  parallelFor(0, chunks, 1, [&](std::int64_t begin, std::int64_t end) {
    const std::size_t from = static_cast<std::size_t>(begin) * kChunk;
    const std::size_t to = std::min(bytes, static_cast<std::size_t>(end) * kChunk);
    std::memset(static_cast<char*>(dst) + from, 0, to - from);
  });
}

void fillElements(void* dst, const void* value, std::int64_t count, std::size_t elemSize) {
  if (count <= 0)
    return;
  auto* d = static_cast<char*>(dst);
  const auto* v = static_cast<const char*>(value);
  const std::size_t total = static_cast<std::size_t>(count) * elemSize;
  if (std::all_of(v, v + elemSize, [](char c) { return c == 0; })) {
    std::memset(d, 0, total);
    return;
  }
  // Doubling copies: log2(count) memcpys instead of count small ones.
  std::memcpy(d, v, elemSize);
  std::size_t filled = elemSize;
  while (filled < total) {
    const std::size_t n = std::min(filled, total - filled);
    std::memcpy(d + filled, d, n);
    filled += n;
  }
}

void stridedCopy(void* dst, const void* src, const Shape& shape, const std::vector<std::int64_t>& srcStrides,
                 std::size_t elemSize) {
  moveStrided<false>(static_cast<char*>(dst), static_cast<const char*>(src), shape, srcStrides, elemSize);
}

void stridedScatter(void* dst, const void* src, const Shape& shape, const std::vector<std::int64_t>& dstStrides,
                    std::size_t elemSize) {
  moveStrided<true>(static_cast<char*>(dst), static_cast<const char*>(src), shape, dstStrides, elemSize);
}

void transposeBytes(void* dst, const void* src, const Shape& inShape, const std::vector<std::int64_t>& perm,
                    std::size_t elemSize) {
  const std::int64_t count = numElements(inShape);
  if (count == 0)
    return;
  const TransposePlan plan = planTranspose(inShape, perm);
  if (plan.copy) {
    copyBytes(dst, src, static_cast<std::size_t>(count) * elemSize);
    return;
  }
  if (plan.rowsContiguous) {
    // The innermost axis stays innermost: rows copy with memcpy.
    stridedCopy(dst, src, plan.shape, plan.srcStrides, elemSize);
    return;
  }
  // Batched 2-D transposes between the input's innermost axis (a) and the output's innermost axis (b), in tiles
  // that stay in cache.
  const std::int64_t da = plan.da;
  const std::int64_t db = plan.db;
  const std::int64_t dstStrideA = plan.dstStrideA;
  const std::int64_t srcStrideB = plan.srcStrideB;
  const Shape& batchDims = plan.batchDims;
  const std::vector<std::int64_t>& batchIn = plan.batchIn;
  const std::vector<std::int64_t>& batchOut = plan.batchOut;
  constexpr std::int64_t kTile = 32;
  const std::int64_t tilesA = (da + kTile - 1) / kTile;
  const std::int64_t tilesB = (db + kTile - 1) / kTile;
  const std::int64_t batches = numElements(batchDims);
  const std::int64_t grain =
      std::max<std::int64_t>(1, kParallelBytes / (kTile * kTile * static_cast<std::int64_t>(elemSize)));
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  parallelFor(0, batches * tilesA * tilesB, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      std::int64_t batch = t / (tilesA * tilesB);
      const std::int64_t rem = t % (tilesA * tilesB);
      const std::int64_t ta = rem / tilesB;
      const std::int64_t tb = rem % tilesB;
      std::int64_t inBase = 0;
      std::int64_t outBase = 0;
      for (std::size_t k = batchDims.size(); k-- > 0;) {
        const std::int64_t i = batch % batchDims[k];
        batch /= batchDims[k];
        inBase += i * batchIn[k];
        outBase += i * batchOut[k];
      }
      copyTile(d + static_cast<std::size_t>(outBase) * elemSize, s + static_cast<std::size_t>(inBase) * elemSize,
               ta * kTile, std::min(da, (ta + 1) * kTile), tb * kTile, std::min(db, (tb + 1) * kTile), dstStrideA,
               srcStrideB, elemSize);
    }
  });
}

}  // namespace shape_detail

namespace {

using namespace shape_detail;

// Kernels whose output holds the input's bytes unchanged (Reshape, Flatten, Squeeze, Unsqueeze).
ComputeFactory copyInputKernel() {
  return [](const KernelInit&) -> ComputeFn {
    return [](KernelContext& ctx) {
      if (!ctx.hasOutput(0))
        return;
      const Tensor& in = ctx.input(0);
      Tensor& out = ctx.output(0);
      if (in.bytes() != out.bytes())
        fail("{} bytes cannot be copied into an output of {} bytes", in.bytes(), out.bytes());
      copyBytes(out.rawData(), in.rawData(), in.bytes());
    };
  };
}

// Axes from input `index` (opset 13+) or from the `axes` attribute (older opsets); empty when neither is given.
std::vector<std::int64_t> axesOperand(const ShapeContext& ctx, std::size_t index) {
  if (ctx.hasInput(index))
    return toInt64Vector(ctx.constantInput(index));
  return ctx.attrs.getInts("axes", {});
}

std::int64_t normalizeAxisOrError(const ShapeContext& ctx, std::int64_t axis, std::int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank) {
    ctx.error(fmt::format("{} {} is out of range for rank {}", what, axis, rank));
  }
  return axis < 0 ? axis + rank : axis;
}

std::vector<TensorMeta> inferReshape(const ShapeContext& ctx) {
  const TensorMeta& in = ctx.input(0).meta;
  const auto target = toInt64Vector(ctx.constantInput(1));
  const bool allowZero = ctx.attrs.getInt("allowzero", 0) != 0;
  Shape out(target.size());
  std::int64_t inferAt = -1;
  std::int64_t known = 1;
  bool hasZero = false;
  for (std::size_t i = 0; i < target.size(); ++i) {
    std::int64_t v = target[i];
    if (v == -1) {
      if (inferAt >= 0)
        ctx.error(fmt::format("shape {} has more than one -1", listToString(target)));
      inferAt = static_cast<std::int64_t>(i);
      continue;
    }
    if (v < -1)
      ctx.error(fmt::format("shape {} has a negative dimension", listToString(target)));
    if (v == 0) {
      hasZero = true;
      if (!allowZero) {
        if (i >= in.shape.size()) {
          ctx.error(fmt::format("shape {} copies dimension {} (0) but the input {} has rank {}", listToString(target),
                                i, shapeToString(in.shape), in.shape.size()));
        }
        v = in.shape[i];
      }
    }
    out[i] = v;
    if (__builtin_mul_overflow(known, v, &known)) {
      ctx.error(fmt::format("shape {} has more elements than a 64-bit count holds", listToString(target)));
    }
  }
  if (allowZero && hasZero && inferAt >= 0) {
    ctx.error(fmt::format("shape {} has both 0 and -1 with allowzero=1", listToString(target)));
  }
  const std::int64_t total = numElements(in.shape);
  if (inferAt >= 0) {
    if (known == 0 || total % known != 0) {
      ctx.error(
          fmt::format("cannot reshape {} ({} elements) to {}", shapeToString(in.shape), total, listToString(target)));
    }
    out[static_cast<std::size_t>(inferAt)] = total / known;
  } else if (known != total) {
    ctx.error(fmt::format("cannot reshape {} ({} elements) to {} ({} elements)", shapeToString(in.shape), total,
                          shapeToString(out), known));
  }
  return {TensorMeta{in.dtype, out}};
}

std::vector<TensorMeta> inferFlatten(const ShapeContext& ctx) {
  const TensorMeta& in = ctx.input(0).meta;
  const auto rank = static_cast<std::int64_t>(in.shape.size());
  std::int64_t axis = ctx.attrs.getInt("axis", 1);
  if (axis < -rank || axis > rank)
    ctx.error(fmt::format("axis {} is out of range for rank {}", axis, rank));
  if (axis < 0)
    axis += rank;
  std::int64_t outer = 1;
  std::int64_t inner = 1;
  for (std::int64_t i = 0; i < rank; ++i)
    (i < axis ? outer : inner) *= in.shape[static_cast<std::size_t>(i)];
  return {TensorMeta{in.dtype, {outer, inner}}};
}

std::vector<TensorMeta> inferSqueeze(const ShapeContext& ctx) {
  const TensorMeta& in = ctx.input(0).meta;
  const auto rank = static_cast<std::int64_t>(in.shape.size());
  const bool explicitAxes = ctx.hasInput(1) || ctx.attrs.has("axes");
  std::vector<bool> drop(in.shape.size(), false);
  if (explicitAxes) {
    for (std::int64_t axis : axesOperand(ctx, 1)) {
      const std::int64_t a = normalizeAxisOrError(ctx, axis, rank, "axis");
      if (in.shape[static_cast<std::size_t>(a)] != 1) {
        ctx.error(fmt::format("cannot squeeze axis {} of size {} (input shape {})", axis,
                              in.shape[static_cast<std::size_t>(a)], shapeToString(in.shape)));
      }
      drop[static_cast<std::size_t>(a)] = true;
    }
  } else {
    for (std::size_t a = 0; a < in.shape.size(); ++a)
      drop[a] = in.shape[a] == 1;
  }
  Shape out;
  for (std::size_t a = 0; a < in.shape.size(); ++a) {
    if (!drop[a])
      out.push_back(in.shape[a]);
  }
  return {TensorMeta{in.dtype, out}};
}

std::vector<TensorMeta> inferUnsqueeze(const ShapeContext& ctx) {
  const TensorMeta& in = ctx.input(0).meta;
  const auto axes = axesOperand(ctx, 1);
  if (axes.empty())
    ctx.error("needs axes");
  const auto outRank = static_cast<std::int64_t>(in.shape.size() + axes.size());
  std::vector<bool> inserted(static_cast<std::size_t>(outRank), false);
  for (std::int64_t axis : axes) {
    const std::int64_t a = normalizeAxisOrError(ctx, axis, outRank, "axis");
    if (inserted[static_cast<std::size_t>(a)])
      ctx.error(fmt::format("axis {} is repeated in axes", axis));
    inserted[static_cast<std::size_t>(a)] = true;
  }
  Shape out;
  std::size_t next = 0;
  for (std::size_t a = 0; a < inserted.size(); ++a)
    out.push_back(inserted[a] ? 1 : in.shape[next++]);
  return {TensorMeta{in.dtype, out}};
}

// Opset 15's start/end: negative counts from the back, then both clamp to [0, rank].
std::pair<std::int64_t, std::int64_t> shapeRange(const Attributes& attrs, std::int64_t rank) {
  auto clampAxis = [rank](std::int64_t v) {
    if (v < 0)
      v += rank;
    return std::clamp<std::int64_t>(v, 0, rank);
  };
  const std::int64_t start = clampAxis(attrs.getInt("start", 0));
  const std::int64_t end = clampAxis(attrs.getInt("end", rank));
  return {start, std::max(start, end)};
}

std::vector<TensorMeta> inferShape(const ShapeContext& ctx) {
  const auto rank = static_cast<std::int64_t>(ctx.input(0).meta.shape.size());
  const auto [start, end] = shapeRange(ctx.attrs, rank);
  return {TensorMeta{DType::Int64, {end - start}}};
}

ComputeFn makeShapeKernel(const KernelInit& init) {
  const Attributes attrs = init.attrs;
  return [attrs](KernelContext& ctx) {
    if (!ctx.hasOutput(0))
      return;
    const Shape& shape = ctx.input(0).shape();
    const auto [start, end] = shapeRange(attrs, static_cast<std::int64_t>(shape.size()));
    auto* out = ctx.output(0).data<std::int64_t>();
    for (std::int64_t i = start; i < end; ++i)
      out[i - start] = shape[static_cast<std::size_t>(i)];
  };
}

// Constant's value as a tensor, from whichever value attribute is set.
Tensor constantValue(const Attributes& attrs) {
  if (attrs.has("value"))
    return attrs.getTensor("value");
  if (attrs.has("value_float"))
    return Tensor::scalar(attrs.getFloat("value_float"));
  if (attrs.has("value_int"))
    return Tensor::scalar(attrs.getInt("value_int"));
  if (attrs.has("value_floats")) {
    const auto values = attrs.getFloats("value_floats");
    Tensor t = Tensor::empty(DType::Float32, {static_cast<std::int64_t>(values.size())});
    if (!values.empty())
      std::memcpy(t.rawData(), values.data(), values.size() * sizeof(float));
    return t;
  }
  if (attrs.has("value_ints")) {
    const auto values = attrs.getInts("value_ints");
    Tensor t = Tensor::empty(DType::Int64, {static_cast<std::int64_t>(values.size())});
    if (!values.empty())
      std::memcpy(t.rawData(), values.data(), values.size() * sizeof(std::int64_t));
    return t;
  }
  for (const char* unsupported : {"value_string", "value_strings", "sparse_value"}) {
    if (attrs.has(unsupported))
      fail("Constant: attribute {} is not supported (no string or sparse tensors)", unsupported);
  }
  fail("Constant: needs one of the attributes value, value_float(s), value_int(s)");
}

std::vector<TensorMeta> inferConstant(const ShapeContext& ctx) {
  try {
    return {constantValue(ctx.attrs).meta()};
  } catch (const Error& e) {
    ctx.error(e.what());
  }
}

ComputeFn makeConstantKernel(const KernelInit& init) {
  const Tensor value = constantValue(init.attrs);
  return [value](KernelContext& ctx) {
    if (ctx.hasOutput(0))
      copyBytes(ctx.output(0).rawData(), value.rawData(), value.bytes());
  };
}

// ConstantOfShape's fill value: the `value` attribute (a one-element tensor) or float 0.
Tensor fillValue(const Attributes& attrs) {
  if (attrs.has("value"))
    return attrs.getTensor("value");
  return Tensor::scalar(0.0F);
}

std::vector<TensorMeta> inferConstantOfShape(const ShapeContext& ctx) {
  const Shape shape = toInt64Vector(ctx.constantInput(0));
  for (std::int64_t d : shape) {
    if (d < 0)
      ctx.error(fmt::format("shape {} has a negative dimension", listToString(shape)));
  }
  const Tensor value = fillValue(ctx.attrs);
  if (value.numel() != 1)
    ctx.error(fmt::format("value must hold one element, not {}", value.numel()));
  return {TensorMeta{value.dtype(), shape}};
}

ComputeFn makeConstantOfShapeKernel(const KernelInit& init) {
  const Tensor value = fillValue(init.attrs);
  return [value](KernelContext& ctx) {
    if (!ctx.hasOutput(0))
      return;
    Tensor& out = ctx.output(0);
    fillElements(out.rawData(), value.rawData(), out.numel(), dtypeSize(out.dtype()));
  };
}

bool rangeTypeSupported(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float64 || dtype == DType::Int32 || dtype == DType::Int64;
}

// Range's element count: max(ceil((limit - start) / delta), 0).
std::int64_t rangeCount(const Tensor& start, const Tensor& limit, const Tensor& delta) {
  if (!isFloatingPoint(start.dtype())) {
    const std::int64_t s = toInt64Vector(start).at(0);
    const std::int64_t l = toInt64Vector(limit).at(0);
    const std::int64_t d = toInt64Vector(delta).at(0);
    if (d == 0)
      fail("delta is 0");
    const std::int64_t span = l - s;
    if ((span > 0) != (d > 0) || span == 0)
      return 0;
    // Ceiling division for same-sign operands.
    return d > 0 ? (span + d - 1) / d : (span + d + 1) / d;
  }
  const double s = elementAsDouble(start);
  const double l = elementAsDouble(limit);
  const double d = elementAsDouble(delta);
  if (d == 0.0)
    fail("delta is 0");
  const double n = std::ceil((l - s) / d);
  if (!(n > 0.0))
    return 0;
  if (n > static_cast<double>(std::numeric_limits<std::int32_t>::max()))
    fail("{} elements is too many", n);
  return static_cast<std::int64_t>(n);
}

std::vector<TensorMeta> inferRange(const ShapeContext& ctx) {
  const DType dtype = ctx.input(0).meta.dtype;
  if (!rangeTypeSupported(dtype))
    ctx.error(fmt::format("type {} is not supported", dtypeName(dtype)));
  for (std::size_t i = 0; i < 3; ++i) {
    const TensorMeta& meta = ctx.input(i).meta;
    if (meta.dtype != dtype)
      ctx.error("start, limit and delta must have the same type");
    if (meta.numel() != 1)
      ctx.error(fmt::format("input {} must be a scalar, not of shape {}", i, shapeToString(meta.shape)));
  }
  try {
    return {TensorMeta{dtype, {rangeCount(ctx.constantInput(0), ctx.constantInput(1), ctx.constantInput(2))}}};
  } catch (const Error& e) {
    ctx.error(e.what());
  }
}

void computeRange(KernelContext& ctx) {
  if (!ctx.hasOutput(0))
    return;
  Tensor& out = ctx.output(0);
  const Tensor& start = ctx.input(0);
  const Tensor& delta = ctx.input(2);
  const std::int64_t n = out.numel();
  if (out.dtype() == DType::Int64 || out.dtype() == DType::Int32) {
    const std::int64_t s = toInt64Vector(start).at(0);
    const std::int64_t d = toInt64Vector(delta).at(0);
    if (out.dtype() == DType::Int64) {
      for (std::int64_t i = 0; i < n; ++i)
        out.data<std::int64_t>()[i] = s + i * d;
    } else {
      for (std::int64_t i = 0; i < n; ++i)
        out.data<std::int32_t>()[i] = static_cast<std::int32_t>(s + i * d);
    }
    return;
  }
  const double s = elementAsDouble(start);
  const double d = elementAsDouble(delta);
  if (out.dtype() == DType::Float64) {
    for (std::int64_t i = 0; i < n; ++i)
      out.data<double>()[i] = s + static_cast<double>(i) * d;
  } else {
    for (std::int64_t i = 0; i < n; ++i)
      out.data<float>()[i] = static_cast<float>(s + static_cast<double>(i) * d);
  }
}

ComputeFactory stateless(void (*fn)(KernelContext&)) {
  return [fn](const KernelInit&) -> ComputeFn { return fn; };
}

}  // namespace

void registerShapeOps(OpRegistry& registry) {
  addOp(registry, "Reshape", inferReshape, copyInputKernel());
  addOp(registry, "Flatten", inferFlatten, copyInputKernel());
  addOp(registry, "Squeeze", inferSqueeze, copyInputKernel());
  addOp(registry, "Unsqueeze", inferUnsqueeze, copyInputKernel());
  addOp(registry, "Shape", inferShape, makeShapeKernel);
  addOp(
      registry, "Size",
      [](const ShapeContext&) {
        return std::vector<TensorMeta>{TensorMeta{DType::Int64, {}}};
      },
      stateless([](KernelContext& ctx) {
        if (ctx.hasOutput(0))
          *ctx.output(0).data<std::int64_t>() = ctx.input(0).numel();
      }));
  addOp(registry, "Constant", inferConstant, makeConstantKernel);
  addOp(registry, "ConstantOfShape", inferConstantOfShape, makeConstantOfShapeKernel);
  addOp(registry, "Range", inferRange, stateless(computeRange));
  registerDataMovementOps(registry);
  registerIndexingOps(registry);
}

}  // namespace strata::cpu
