#include "conv_whole_map.h"

#include <algorithm>
#include <cstring>

#include "strata/thread_pool.h"

namespace strata::cpu {
namespace {

// For each (o, p) pair, the tap it meets as a flat index into the kernel's taps (row-major).
std::vector<std::int64_t> pairTaps(const WholeMapConv& m) {
  const WindowGeometry& g = m.geometry;
  const std::size_t dims = g.kernel.size();
  const Shape in(m.spreadWeight.begin() + 2, m.spreadWeight.end());
  std::vector<std::int64_t> taps(static_cast<std::size_t>(m.outPixels * m.inPixels));
  std::vector<std::int64_t> o(dims, 0);
  for (std::int64_t oi = 0; oi < m.outPixels; ++oi) {
    std::vector<std::int64_t> p(dims, 0);
    for (std::int64_t pi = 0; pi < m.inPixels; ++pi) {
      std::int64_t tap = 0;
      for (std::size_t d = 0; d < dims; ++d)
        tap = tap * g.kernel[d] + p[d] - (o[d] * g.strides[d] - g.padBegin[d]);
      taps[static_cast<std::size_t>(oi * m.inPixels + pi)] = tap;
      for (std::size_t d = dims; d-- > 0;) {
        if (++p[d] < in[d])
          break;
        p[d] = 0;
      }
    }
    for (std::size_t d = dims; d-- > 0;) {
      if (++o[d] < g.output[d])
        break;
      o[d] = 0;
    }
  }
  return taps;
}

}  // namespace

std::optional<WholeMapConv> WholeMapConv::plan(const Shape& x, const Shape& w, std::int64_t group,
                                               const WindowGeometry& g, bool channelsLast, std::size_t maxBytes) {
  if (group != 1 || channelsLast || x.size() < 3)
    return std::nullopt;
  const std::size_t dims = g.kernel.size();
  WholeMapConv m;
  m.weight = w;
  m.geometry = g;
  m.images = x[0];
  m.channels = x[1];
  m.outPixels = 1;
  m.inPixels = 1;
  for (std::size_t d = 0; d < dims; ++d) {
    const std::int64_t in = x[2 + d];
    if (g.dilations[d] != 1)
      return std::nullopt;
    // Every window starts at or before 0 (the last one does) and ends at or after in - 1 (the first one does).
    const std::int64_t lastStart = (g.output[d] - 1) * g.strides[d] - g.padBegin[d];
    if (lastStart > 0 || -g.padBegin[d] + g.kernel[d] - 1 < in - 1)
      return std::nullopt;
    m.outPixels *= g.output[d];
    m.inPixels *= in;
  }
  if (m.outPixels == 1)
    return std::nullopt;  // Note [Convolutions as one GEMM] takes it as it is
  m.spreadWeight = {w[0] * m.outPixels, x[1]};
  m.spreadWeight.insert(m.spreadWeight.end(), x.begin() + 2, x.end());
  if (m.spreadBytes() > maxBytes)
    return std::nullopt;
  m.spreadGeometry.kernel.assign(x.begin() + 2, x.end());
  m.spreadGeometry.strides.assign(dims, 1);
  m.spreadGeometry.dilations.assign(dims, 1);
  m.spreadGeometry.padBegin.assign(dims, 0);
  m.spreadGeometry.padEnd.assign(dims, 0);
  m.spreadGeometry.output.assign(dims, 1);
  return m;
}

void WholeMapConv::toChannelsLast(const float* x, float* xLast) const {
  parallelFor(0, images, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t n = begin; n < end; ++n) {
      const float* in = x + n * channels * inPixels;
      float* out = xLast + n * channels * inPixels;
      for (std::int64_t c = 0; c < channels; ++c)
        for (std::int64_t p = 0; p < inPixels; ++p)
          out[p * channels + c] = in[c * inPixels + p];
    }
  });
}

void WholeMapConv::toChannelsFirst(const float* xLast, float* x) const {
  parallelFor(0, images, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t n = begin; n < end; ++n) {
      const float* in = xLast + n * channels * inPixels;
      float* out = x + n * channels * inPixels;
      for (std::int64_t p = 0; p < inPixels; ++p)
        for (std::int64_t c = 0; c < channels; ++c)
          out[c * inPixels + p] = in[p * channels + c];
    }
  });
}

void WholeMapConv::spreadWeights(const float* w, float* spread) const {
  const std::vector<std::int64_t> taps = pairTaps(*this);
  const std::int64_t filters = weight[0], kernel = numElements(weight) / (filters * channels);
  // Per filter: its [C, taps] block turned [taps, C] (small, in cache), then rows of W' as runs of C values.
  parallelFor(0, filters, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> byTap(static_cast<std::size_t>(kernel * channels));
    for (std::int64_t k = begin; k < end; ++k) {
      const float* block = w + k * channels * kernel;
      for (std::int64_t c = 0; c < channels; ++c)
        for (std::int64_t t = 0; t < kernel; ++t)
          byTap[static_cast<std::size_t>(t * channels + c)] = block[c * kernel + t];
      for (std::int64_t o = 0; o < outPixels; ++o) {
        float* row = spread + (k * outPixels + o) * inPixels * channels;
        for (std::int64_t p = 0; p < inPixels; ++p) {
          const float* run = byTap.data() + taps[static_cast<std::size_t>(o * inPixels + p)] * channels;
          std::copy(run, run + channels, row + p * channels);
        }
      }
    }
  });
}

void WholeMapConv::spreadBias(const float* b, float* spread) const {
  for (std::int64_t k = 0; k < weight[0]; ++k)
    std::fill(spread + k * outPixels, spread + (k + 1) * outPixels, b[k]);
}

void WholeMapConv::foldWeightGradient(const float* spread, float* dw) const {
  const std::vector<std::int64_t> taps = pairTaps(*this);
  const std::int64_t filters = weight[0], kernel = numElements(weight) / (filters * channels);
  // Per filter: runs of C values added into its [taps, C] sums, then turned back into [C, taps].
  parallelFor(0, filters, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> byTap(static_cast<std::size_t>(kernel * channels));
    for (std::int64_t k = begin; k < end; ++k) {
      std::fill(byTap.begin(), byTap.end(), 0.0f);
      for (std::int64_t o = 0; o < outPixels; ++o) {
        const float* row = spread + (k * outPixels + o) * inPixels * channels;
        for (std::int64_t p = 0; p < inPixels; ++p) {
          float* sum = byTap.data() + taps[static_cast<std::size_t>(o * inPixels + p)] * channels;
          const float* run = row + p * channels;
          for (std::int64_t c = 0; c < channels; ++c)
            sum[c] += run[c];
        }
      }
      float* block = dw + k * channels * kernel;
      for (std::int64_t c = 0; c < channels; ++c)
        for (std::int64_t t = 0; t < kernel; ++t)
          block[c * kernel + t] = byTap[static_cast<std::size_t>(t * channels + c)];
    }
  });
}

void WholeMapConv::foldBiasGradient(const float* spread, float* db) const {
  for (std::int64_t k = 0; k < weight[0]; ++k) {
    float sum = 0.0f;
    for (std::int64_t o = 0; o < outPixels; ++o)
      sum += spread[k * outPixels + o];
    db[k] = sum;
  }
}

}  // namespace strata::cpu
