#include "conv_depthwise_grad.h"

#include <algorithm>
#include <vector>

#include "strata/thread_pool.h"

namespace strata::cpu {

std::optional<DepthwiseWeightGradient> DepthwiseWeightGradient::plan(const Shape& x, const Shape& w, std::int64_t group,
                                                                     const WindowGeometry& geometry,
                                                                     bool channelsLast) {
  if (x.size() != 4 || w.size() != 4 || w[1] != 1 || group != x[1] || group < 2 || w[0] % group != 0)
    return std::nullopt;
  DepthwiseWeightGradient d;
  d.channelsLast_ = channelsLast;
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
  if (channelsLast_)
    runChannelsLast(dy, x, dw, db);
  else
    runPlanes(dy, x, dw, db);
}

void DepthwiseWeightGradient::runPlanes(const float* dy, const float* x, float* dw, float* db) const {
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

void DepthwiseWeightGradient::runChannelsLast(const float* dy, const float* x, float* dw, float* db) const {
  constexpr std::int64_t kBlock = 64;  // channels per task: one row of accumulators per tap
  const std::int64_t multiplier = outChannels_ / channels_;
  const std::int64_t taps = kernel_[0] * kernel_[1];
  const std::int64_t blocks = (outChannels_ + kBlock - 1) / kBlock;
  parallelFor(0, blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> image(static_cast<std::size_t>((taps + 1) * kBlock));  // one image's sums; the last row dB's
    std::vector<double> total(image.size());
    for (std::int64_t block = begin; block < end; ++block) {
      const std::int64_t o0 = block * kBlock, width = std::min(kBlock, outChannels_ - o0);
      std::fill(total.begin(), total.end(), 0.0);
      for (std::int64_t n = 0; n < images_; ++n) {
        std::fill(image.begin(), image.end(), 0.0f);
        float* biasSums = image.data() + taps * kBlock;
        for (std::int64_t oh = 0; oh < out_[0]; ++oh) {
          for (std::int64_t ow = 0; ow < out_[1]; ++ow) {
            const float* g = dy + ((n * out_[0] + oh) * out_[1] + ow) * outChannels_ + o0;
#pragma omp simd
            for (std::int64_t k = 0; k < width; ++k)
              biasSums[k] += g[k];
            for (std::int64_t i = 0; i < kernel_[0]; ++i) {
              const std::int64_t ih = oh * stride_[0] + i * dilation_[0] - padBegin_[0];
              if (ih < 0 || ih >= in_[0])
                continue;
              for (std::int64_t j = 0; j < kernel_[1]; ++j) {
                const std::int64_t iw = ow * stride_[1] + j * dilation_[1] - padBegin_[1];
                if (iw < 0 || iw >= in_[1])
                  continue;
                const float* pixel = x + ((n * in_[0] + ih) * in_[1] + iw) * channels_;
                float* sums = image.data() + (i * kernel_[1] + j) * kBlock;
                if (multiplier == 1) {
                  const float* xc = pixel + o0;
#pragma omp simd
                  for (std::int64_t k = 0; k < width; ++k)
                    sums[k] += g[k] * xc[k];
                } else {
                  for (std::int64_t k = 0; k < width; ++k)
                    sums[k] += g[k] * pixel[(o0 + k) / multiplier];
                }
              }
            }
          }
        }
        for (std::size_t e = 0; e < image.size(); ++e)
          total[e] += image[e];
      }
      for (std::int64_t k = 0; k < width; ++k) {
        if (dw != nullptr) {
          for (std::int64_t t = 0; t < taps; ++t)
            dw[(o0 + k) * taps + t] = static_cast<float>(total[static_cast<std::size_t>(t * kBlock + k)]);
        }
        if (db != nullptr)
          db[o0 + k] = static_cast<float>(total[static_cast<std::size_t>(taps * kBlock + k)]);
      }
    }
  });
}

}  // namespace strata::cpu
