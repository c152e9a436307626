#include "batch_norm_loops.h"

#include <algorithm>

#include "strata/thread_pool.h"

namespace strata::cpu {
namespace {

constexpr std::int64_t kSumBlock = 2048;  // elements summed in float before the total moves to double

// Channels per task: enough work per task to pay for it, small enough blocks for both threads to get some.
std::int64_t channelGrain(const ChannelLayout& layout) {
  return std::max<std::int64_t>(1, 8192 / std::max<std::int64_t>(layout.count(), 1));
}

// Sums of one channel plane of `size` elements into the channel's double totals.
void sumPlane(const float* x, const float* dy, std::int64_t size, float shift, double& tx, double& txx, double& tdy,
              double& tdyx) {
  for (std::int64_t i0 = 0; i0 < size; i0 += kSumBlock) {
    const std::int64_t i1 = std::min(size, i0 + kSumBlock);
    float sx = 0, sxx = 0, sdy = 0, sdyx = 0;
    if (dy == nullptr) {
#pragma omp simd reduction(+ : sx, sxx)
      for (std::int64_t i = i0; i < i1; ++i) {
        const float xs = x[i] - shift;
        sx += xs;
        sxx += xs * xs;
      }
    } else {
#pragma omp simd reduction(+ : sx, sxx, sdy, sdyx)
      for (std::int64_t i = i0; i < i1; ++i) {
        const float xs = x[i] - shift;
        sx += xs;
        sxx += xs * xs;
        sdy += dy[i];
        sdyx += dy[i] * xs;
      }
    }
    tx += sx;
    txx += sxx;
    tdy += sdy;
    tdyx += sdyx;
  }
}

}  // namespace

ChannelLayout channelLayoutOf(const Shape& stored, bool channelsLast) {
  const std::int64_t numel = numElements(stored);
  if (channelsLast) {
    const std::int64_t channels = stored.back();
    return ChannelLayout{channels == 0 ? 0 : numel / channels, channels, 1};
  }
  const std::int64_t batch = stored.at(0), channels = stored.at(1);
  return ChannelLayout{batch, channels, batch * channels == 0 ? 0 : numel / (batch * channels)};
}

ChannelSums channelSums(const ChannelLayout& layout, const float* x, const float* dy, const float* shift) {
  const auto channels = static_cast<std::size_t>(layout.channels);
  ChannelSums sums{std::vector<double>(channels), std::vector<double>(channels), std::vector<double>(channels),
                   std::vector<double>(channels)};
  const std::int64_t inner = layout.inner;
  parallelFor(0, layout.channels, channelGrain(layout), [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t n = 0; n < layout.batch; ++n) {
      const std::int64_t image = n * layout.channels;
      if (inner == 1) {  // one pixel per channel (1x1 maps): vectorise across channels instead
        double* tx = sums.x.data();
        double* txx = sums.xx.data();
        if (dy == nullptr) {
#pragma omp simd
          for (std::int64_t c = c0; c < c1; ++c) {
            const double xs = static_cast<double>(x[image + c] - shift[c]);
            tx[c] += xs;
            txx[c] += xs * xs;
          }
        } else {
          double* tdy = sums.dy.data();
          double* tdyx = sums.dyx.data();
#pragma omp simd
          for (std::int64_t c = c0; c < c1; ++c) {
            const double xs = static_cast<double>(x[image + c] - shift[c]);
            const double g = dy[image + c];
            tx[c] += xs;
            txx[c] += xs * xs;
            tdy[c] += g;
            tdyx[c] += g * xs;
          }
        }
        continue;
      }
      for (std::int64_t c = c0; c < c1; ++c) {
        const std::int64_t offset = (image + c) * inner;
        const auto i = static_cast<std::size_t>(c);
        double unused0 = 0, unused1 = 0;
        sumPlane(x + offset, dy != nullptr ? dy + offset : nullptr, inner, shift[c], sums.x[i], sums.xx[i],
                 dy != nullptr ? sums.dy[i] : unused0, dy != nullptr ? sums.dyx[i] : unused1);
      }
    }
  });
  return sums;
}

namespace {

// Runs fn(offset of the plane, channel, plane size) over every (image, channel) plane, channel blocks per task;
// fnRow(offset of the image's channels c0.., c0, c1) instead for one-pixel planes, so that those vectorise across
// channels.
template <typename PlaneFn, typename RowFn>
void forPlanes(const ChannelLayout& layout, PlaneFn&& fn, RowFn&& fnRow) {
  parallelFor(0, layout.channels, channelGrain(layout), [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t n = 0; n < layout.batch; ++n) {
      const std::int64_t image = n * layout.channels;
      if (layout.inner == 1) {
        fnRow(image, c0, c1);
        continue;
      }
      for (std::int64_t c = c0; c < c1; ++c)
        fn((image + c) * layout.inner, c);
    }
  });
}

}  // namespace

void normalize(const ChannelLayout& layout, const float* x, const float* mean, const float* a, const float* b,
               float* y) {
  const std::int64_t inner = layout.inner;
  forPlanes(
      layout,
      [&](std::int64_t offset, std::int64_t c) {
        const float* xp = x + offset;
        float* yp = y + offset;
        const float ac = a[c], mc = mean[c], bc = b[c];
#pragma omp simd
        for (std::int64_t i = 0; i < inner; ++i)
          yp[i] = ac * (xp[i] - mc) + bc;
      },
      [&](std::int64_t image, std::int64_t c0, std::int64_t c1) {
        const float* xi = x + image;
        float* yi = y + image;
#pragma omp simd
        for (std::int64_t c = c0; c < c1; ++c)
          yi[c] = a[c] * (xi[c] - mean[c]) + b[c];
      });
}

void normalizeGrad(const ChannelLayout& layout, const float* dy, const float* x, const float* mean, const float* a,
                   const float* b, const float* c, float* dx) {
  const std::int64_t inner = layout.inner;
  forPlanes(
      layout,
      [&](std::int64_t offset, std::int64_t ch) {
        const float* gp = dy + offset;
        const float* xp = x + offset;
        float* out = dx + offset;
        const float ac = a[ch], bc = b[ch], cc = c[ch], mc = mean[ch];
#pragma omp simd
        for (std::int64_t i = 0; i < inner; ++i)
          out[i] = ac * gp[i] + bc * (xp[i] - mc) + cc;
      },
      [&](std::int64_t image, std::int64_t c0, std::int64_t c1) {
        const float* gi = dy + image;
        const float* xi = x + image;
        float* out = dx + image;
#pragma omp simd
        for (std::int64_t ch = c0; ch < c1; ++ch)
          out[ch] = a[ch] * gi[ch] + b[ch] * (xi[ch] - mean[ch]) + c[ch];
      });
}

}  // namespace strata::cpu
