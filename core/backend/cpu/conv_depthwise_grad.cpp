#include "conv_depthwise_grad.h"

#include <algorithm>

#include "strata/thread_pool.h"

namespace strata::cpu {

std::optional<DepthwiseWeightGradient> DepthwiseWeightGradient::plan(const Shape& x, const Shape& w, std::int64_t group,
                                                                     const WindowGeometry& geometry) {
  if (x.size() != 4 || w.size() != 4 || w[1] != 1 || group != x[1] || group < 2 || w[0] % group != 0)
    return std::nullopt;
  DepthwiseWeightGradient d;
  d.images_ = x[0];
  d.channels_ = x[1];
  d.outChannels_ = w[0];
  for (std::size_t i = 0; i < 2; ++i) {
    d.in_[i] = x[2 + i];
    d.out_[i] = geometry.output[i];
    d.kernel_[i] = w[2 + i];
    d.stride_[i] = geometry.strides[i];
    d.dilation_[i] = geometry.dilations[i];
    d.padBegin_[i] = geometry.padBegin[i];
  }
  return d;
}

DepthwiseWeightGradient::Span DepthwiseWeightGradient::span(std::size_t dim, std::int64_t tap) const {
  // Output position p reads input position p * stride + offset.
  const std::int64_t offset = tap * dilation_[dim] - padBegin_[dim];
  const std::int64_t s = stride_[dim];
  Span r;
  r.begin = offset >= 0 ? 0 : (-offset + s - 1) / s;
  const std::int64_t room = in_[dim] - offset;  // positions p * stride < room stay inside the map
  r.end = room <= 0 ? 0 : std::min(out_[dim], (room + s - 1) / s);
  r.begin = std::min(r.begin, r.end);
  return r;
}

void DepthwiseWeightGradient::run(const float* dy, const float* x, float* dw, float* db) const {
  const std::int64_t multiplier = outChannels_ / channels_;
  const std::int64_t inPlane = in_[0] * in_[1], outPlane = out_[0] * out_[1];
  const std::int64_t taps = kernel_[0] * kernel_[1];
  const std::int64_t strideW = stride_[1];
  parallelFor(0, outChannels_, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t o = begin; o < end; ++o) {
      const std::int64_t c = o / multiplier;
      if (dw != nullptr) {
        for (std::int64_t i = 0; i < kernel_[0]; ++i) {
          const Span rows = span(0, i);
          for (std::int64_t j = 0; j < kernel_[1]; ++j) {
            const Span cols = span(1, j);
            const std::int64_t rowOffset = i * dilation_[0] - padBegin_[0];
            const std::int64_t colOffset = j * dilation_[1] - padBegin_[1];
            double sum = 0.0;
            for (std::int64_t n = 0; n < images_; ++n) {
              const float* dyPlane = dy + (n * outChannels_ + o) * outPlane;
              const float* xPlane = x + (n * channels_ + c) * inPlane;
              for (std::int64_t oh = rows.begin; oh < rows.end; ++oh) {
                const float* dyRow = dyPlane + oh * out_[1];
                // An index, not a pointer: the row's start (colOffset < 0) may lie before the plane.
                const std::int64_t xRow = (oh * stride_[0] + rowOffset) * in_[1] + colOffset;
                float row = 0.0f;
#pragma omp simd reduction(+ : row)
                for (std::int64_t ow = cols.begin; ow < cols.end; ++ow)
                  row += dyRow[ow] * xPlane[xRow + ow * strideW];
                sum += row;
              }
            }
            dw[o * taps + i * kernel_[1] + j] = static_cast<float>(sum);
          }
        }
      }
      if (db != nullptr) {
        double sum = 0.0;
        for (std::int64_t n = 0; n < images_; ++n) {
          const float* dyPlane = dy + (n * outChannels_ + o) * outPlane;
          float plane = 0.0f;
#pragma omp simd reduction(+ : plane)
          for (std::int64_t p = 0; p < outPlane; ++p)
            plane += dyPlane[p];
          sum += plane;
        }
        db[o] = static_cast<float>(sum);
      }
    }
  });
}

}  // namespace strata::cpu
