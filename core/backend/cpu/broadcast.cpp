#include "broadcast.h"

#include <cstring>

namespace strata::cpu {

std::int64_t BroadcastLayout::rowCount() const {
  std::int64_t rows = 1;
  for (std::size_t d = 0; d + 1 < dims.size(); ++d) {
    rows *= dims[d];
  }
  return rows;
}

Shape broadcastAllShapes(std::span<const Shape> shapes) {
  Shape out;
  for (const Shape& shape : shapes) {
    out = broadcastShapes(out, shape);
  }
  return out;
}

BroadcastLayout makeBroadcastLayout(const Shape& outShape, std::span<const Shape> inputShapes) {
  const std::size_t rank = outShape.size();
  const std::size_t inputs = inputShapes.size();
  // Full-rank strides per input, 0 where the input is broadcast.
  std::vector<std::vector<std::int64_t>> full(inputs, std::vector<std::int64_t>(rank, 0));
  for (std::size_t k = 0; k < inputs; ++k) {
    const Shape& shape = inputShapes[k];
    STRATA_CHECK(shape.size() <= rank, "cannot broadcast shape {} to {}", shapeToString(shape),
                 shapeToString(outShape));
    const std::size_t pad = rank - shape.size();
    std::int64_t stride = 1;
    for (std::size_t d = shape.size(); d-- > 0;) {
      const std::int64_t dim = shape[d];
      STRATA_CHECK(dim == outShape[d + pad] || dim == 1, "cannot broadcast shape {} to {}", shapeToString(shape),
                   shapeToString(outShape));
      full[k][d + pad] = dim == 1 ? 0 : stride;
      stride *= dim;
    }
  }

  BroadcastLayout layout;
  layout.strides.assign(inputs, {});
  // Walk from the innermost dim outwards, dropping size-1 dims and merging a dim into the one inside it when
  // every input steps through both as one contiguous (or fully broadcast) run.
  std::vector<std::int64_t> dimsRev;
  std::vector<std::vector<std::int64_t>> stridesRev(inputs);
  for (std::size_t d = rank; d-- > 0;) {
    const std::int64_t dim = outShape[d];
    if (dim == 1) {
      continue;
    }
    bool merge = !dimsRev.empty();
    for (std::size_t k = 0; k < inputs && merge; ++k) {
      merge = full[k][d] == stridesRev[k].back() * dimsRev.back();
    }
    if (merge) {
      dimsRev.back() *= dim;
      continue;
    }
    dimsRev.push_back(dim);
    for (std::size_t k = 0; k < inputs; ++k) {
      stridesRev[k].push_back(full[k][d]);
    }
  }
  if (dimsRev.empty() || numElements(outShape) == 0) {
    // Scalar output, or an empty one (any layout with no elements will do).
    layout.dims = {dimsRev.empty() ? 1 : 0};
    for (std::size_t k = 0; k < inputs; ++k) {
      layout.strides[k] = {0};
    }
    return layout;
  }
  layout.dims.assign(dimsRev.rbegin(), dimsRev.rend());
  for (std::size_t k = 0; k < inputs; ++k) {
    layout.strides[k].assign(stridesRev[k].rbegin(), stridesRev[k].rend());
  }
  return layout;
}

namespace {

template <typename T>
void broadcastCopyTyped(const Tensor& src, Tensor& dst) {
  const T* in = static_cast<const T*>(src.rawData());
  T* out = static_cast<T*>(dst.rawData());
  const Shape shapes[] = {src.shape()};
  const BroadcastLayout layout = makeBroadcastLayout(dst.shape(), shapes);
  const std::int64_t inner = layout.innerStride(0);
  parallelChunks(layout.rowCount(), layout.rowLength(), [&](std::int64_t begin, std::int64_t end) {
    forEachBroadcastRow(layout, begin, end, [&](std::int64_t o, const std::int64_t* offsets, std::int64_t n) {
      const T* row = in + offsets[0];
      T* dstRow = out + o;
      if (inner == 0) {
        const T value = row[0];
        for (std::int64_t i = 0; i < n; ++i) {
          dstRow[i] = value;
        }
      } else {
        std::memcpy(dstRow, row, static_cast<std::size_t>(n) * sizeof(T));
      }
    });
  });
}

}  // namespace

void broadcastCopy(const Tensor& src, Tensor& dst) {
  STRATA_CHECK(src.dtype() == dst.dtype(), "broadcastCopy: dtype {} to {}", dtypeName(src.dtype()),
               dtypeName(dst.dtype()));
  if (dst.numel() == 0) {
    return;
  }
  switch (dtypeSize(src.dtype())) {
    case 1:
      broadcastCopyTyped<std::uint8_t>(src, dst);
      break;
    case 2:
      broadcastCopyTyped<std::uint16_t>(src, dst);
      break;
    case 4:
      broadcastCopyTyped<std::uint32_t>(src, dst);
      break;
    case 8:
      broadcastCopyTyped<std::uint64_t>(src, dst);
      break;
    default:
      fail("broadcastCopy: unsupported element size {}", dtypeSize(src.dtype()));
  }
}

}  // namespace strata::cpu
