#include "conv_batch_columns.h"

#include <algorithm>
#include <cstring>

#include "dnnl_layout_detour.h"
#include "strata/thread_pool.h"

namespace strata::cpu {

std::unique_ptr<BatchColumnsConv> BatchColumnsConv::plan(const Shape& x, const Shape& w, std::int64_t group,
                                                         const WindowGeometry& g, bool bias, bool channelsLast,
                                                         std::size_t maxBytes) {
  if (!channelsLast || group != 1 || x.size() != 4 || g.kernel.size() != 2)
    return nullptr;
  const std::int64_t outPixels = g.output[0] * g.output[1], taps = g.kernel[0] * g.kernel[1];
  const bool strided = g.strides[0] > 1 || g.strides[1] > 1;
  if (taps == 1 || outPixels > ConvGemm::kMaxGemmPixels || !strided)
    return nullptr;
  const std::int64_t rows = x[0] * outPixels, width = taps * x[1];
  const std::size_t columnBytes = static_cast<std::size_t>(rows * width) * sizeof(float);
  if (columnBytes > maxBytes)
    return nullptr;
  WindowGeometry single;  // one tap, one pixel per row
  single.kernel.assign(2, 1);
  single.strides.assign(2, 1);
  single.dilations.assign(2, 1);
  single.padBegin.assign(2, 0);
  single.padEnd.assign(2, 0);
  single.output.assign(2, 1);
  std::unique_ptr<ConvGemm> gemm = ConvGemm::plan({rows, width, 1, 1}, {w[0], width, 1, 1}, 1, single, bias, true);
  if (gemm == nullptr)
    return nullptr;
  std::unique_ptr<BatchColumnsConv> m(new BatchColumnsConv());
  m->geometry_ = g;
  m->images_ = x[0];
  m->channels_ = x[1];
  m->height_ = x[2];
  m->width_ = x[3];
  m->outPixels_ = outPixels;
  m->taps_ = taps;
  m->columns_ = alignUp(gemm->scratchBytes());
  m->forwardBytes_ = m->columns_ + alignUp(columnBytes);
  m->dColumns_ = m->forwardBytes_;
  m->backwardBytes_ = m->dColumns_ + alignUp(columnBytes);
  m->gemm_ = std::move(gemm);
  return m;
}

std::string BatchColumnsConv::implementation() const {
  return gemm_->implementation() + "; batch columns";
}

void BatchColumnsConv::forward(const float* x, const float* w, const float* b, float* y, char* scratch) const {
  auto* columns = reinterpret_cast<float*>(scratch + columns_);
  gather(x, columns);
  gemm_->forward(columns, w, b, y, scratch);
}

void BatchColumnsConv::backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db,
                                char* scratch) const {
  auto* columns = reinterpret_cast<float*>(scratch + columns_);
  auto* dColumns = reinterpret_cast<float*>(scratch + dColumns_);
  if (dw != nullptr)
    gather(x, columns);
  gemm_->backward(dy, dw != nullptr ? columns : nullptr, dx != nullptr ? w : nullptr,
                  dx != nullptr ? dColumns : nullptr, dw, db, scratch);
  if (dx != nullptr)
    scatter(dColumns, dx);
}

void BatchColumnsConv::gather(const float* x, float* columns) const {
  const WindowGeometry& g = geometry_;
  const std::int64_t outW = g.output[1], c = channels_;
  parallelFor(0, images_ * outPixels_, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      const std::int64_t n = row / outPixels_, oh = row % outPixels_ / outW, ow = row % outW;
      float* out = columns + row * taps_ * c;
      for (std::int64_t i = 0; i < g.kernel[0]; ++i) {
        const std::int64_t ih = oh * g.strides[0] - g.padBegin[0] + i * g.dilations[0];
        for (std::int64_t j = 0; j < g.kernel[1]; ++j, out += c) {
          const std::int64_t iw = ow * g.strides[1] - g.padBegin[1] + j * g.dilations[1];
          if (ih >= 0 && ih < height_ && iw >= 0 && iw < width_) {
            std::memcpy(out, x + ((n * height_ + ih) * width_ + iw) * c, sizeof(float) * static_cast<std::size_t>(c));
          } else {
            std::fill_n(out, c, 0.0f);
          }
        }
      }
    }
  });
}

void BatchColumnsConv::scatter(const float* dColumns, float* dx) const {
  const WindowGeometry& g = geometry_;
  const std::int64_t outW = g.output[1], c = channels_, image = height_ * width_ * c;
  // One task per image: the windows of an image overlap, those of two images never do.
  parallelFor(0, images_, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t n = begin; n < end; ++n) {
      float* target = dx + n * image;
      std::fill_n(target, image, 0.0f);
      for (std::int64_t p = 0; p < outPixels_; ++p) {
        const std::int64_t oh = p / outW, ow = p % outW;
        const float* from = dColumns + (n * outPixels_ + p) * taps_ * c;
        for (std::int64_t i = 0; i < g.kernel[0]; ++i) {
          const std::int64_t ih = oh * g.strides[0] - g.padBegin[0] + i * g.dilations[0];
          for (std::int64_t j = 0; j < g.kernel[1]; ++j, from += c) {
            const std::int64_t iw = ow * g.strides[1] - g.padBegin[1] + j * g.dilations[1];
            if (ih < 0 || ih >= height_ || iw < 0 || iw >= width_)
              continue;
            float* to = target + (ih * width_ + iw) * c;
#pragma omp simd
            for (std::int64_t k = 0; k < c; ++k)
              to[k] += from[k];
          }
        }
      }
    }
  });
}

}  // namespace strata::cpu
