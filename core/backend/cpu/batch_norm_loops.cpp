#include "batch_norm_loops.h"

#include <algorithm>
#include <array>

#include "strata/thread_pool.h"

namespace strata::cpu {
namespace {

constexpr std::int64_t kSumBlock = 2048;  // elements summed in float before the total moves to double

// Note [Small planes]: planes of fewer elements than this (ResNet-50's layers 2-4 at 32x32 input: 4x4, 2x2 and 1x1
// maps) are not walked one (image, channel) plane at a time, a call and a loop of a few elements each: a task's
// channels of one image are one contiguous run, processed as one vectorised loop with each channel's coefficients
// (and sums) repeated for its pixels. ResNet-50's training step (batch 32, 2 threads, Zen 5): the batch-norm sums'
// planes alone took 6% of it.
constexpr std::int64_t kSmallPlane = 32;

// Each of channels c0..c1's values repeated `inner` times.
std::vector<float> perElement(const float* perChannel, std::int64_t c0, std::int64_t c1, std::int64_t inner) {
  std::vector<float> out(static_cast<std::size_t>((c1 - c0) * inner));
  for (std::int64_t c = c0; c < c1; ++c)
    std::fill_n(out.begin() + (c - c0) * inner, inner, perChannel[c]);
  return out;
}

// Channels per task: enough work per task to pay for it, small enough blocks for both threads to get some.
std::int64_t channelGrain(const ChannelLayout& layout) {
  return std::max<std::int64_t>(1, 8192 / std::max<std::int64_t>(layout.count(), 1));
}

// Note [Fused ReLU]: dy where the gate (the fused node's output) is positive, as ReluGrad writes it.
template <bool Gated>
inline float gatedGrad(const float* dy, const float* gate, std::int64_t i) {
  if constexpr (Gated)
    return gate[i] > 0.0f ? dy[i] : 0.0f;
  return dy[i];
}

// Relu's rule (x > 0 ? x : 0, NaN to 0), as the Relu kernel computes it.
inline float reluOf(float v) {
  return v > 0.0f ? v : 0.0f;
}

// Sums of one channel plane of `size` elements into the channel's double totals.
template <bool Gated>
void sumPlane(const float* x, const float* dy, const float* gate, std::int64_t size, float shift, double& tx,
              double& txx, double& tdy, double& tdyx) {
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
        const float g = gatedGrad<Gated>(dy, gate, i);
        sx += xs;
        sxx += xs * xs;
        sdy += g;
        sdyx += g * xs;
      }
    }
    tx += sx;
    txx += sxx;
    tdy += sdy;
    tdyx += sdyx;
  }
}

// Note [Row-major batch norm]: with one element per (image, channel) plane, which is every channels-last operand
// ([N x spatial, C, 1]) and channels-first maps of 1x1, X is [rows, C] row-major. Walking it a block of channels at a
// time (what the plane loops do) reads a few values of every row per task, and the tasks share each row's cache
// lines; these loops give each task whole rows instead, vectorised across the channels with per-channel
// coefficients. The sums go per fixed block of rows (a count set by the rows alone, so the result does not depend on
// the thread count), in float over at most kRowsInFloat rows and then in double, and the blocks' totals are added in
// block order.
constexpr std::int64_t kRowsInFloat = 128;
constexpr std::int64_t kMaxRowBlocks = 256;

std::int64_t rowsPerBlock(std::int64_t rows) {
  return std::max<std::int64_t>(512, (rows + kMaxRowBlocks - 1) / kMaxRowBlocks);
}

// Rows per task for an elementwise pass over [rows, channels].
std::int64_t rowGrain(std::int64_t channels) {
  return std::max<std::int64_t>(1, 8192 / std::max<std::int64_t>(channels, 1));
}

template <bool Gated>
ChannelSums rowSums(const ChannelLayout& layout, const float* x, const float* dy, const float* shift,
                    const float* gate) {
  const std::int64_t rows = layout.batch, channels = layout.channels;
  const auto width = static_cast<std::size_t>(channels);
  const std::int64_t perBlock = rowsPerBlock(rows);
  const std::int64_t blocks = (rows + perBlock - 1) / perBlock;
  const std::size_t sumsPerBlock = dy == nullptr ? 2 : 4;
  std::vector<double> partials(static_cast<std::size_t>(blocks) * sumsPerBlock * width, 0.0);
  parallelFor(0, blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    std::vector<float> floats(sumsPerBlock * width);
    float* fx = floats.data();
    float* fxx = fx + width;
    float* fdy = dy == nullptr ? nullptr : fxx + width;
    float* fdyx = dy == nullptr ? nullptr : fdy + width;
    for (std::int64_t block = b0; block < b1; ++block) {
      double* totals = partials.data() + static_cast<std::size_t>(block) * sumsPerBlock * width;
      const std::int64_t end = std::min(rows, (block + 1) * perBlock);
      for (std::int64_t r0 = block * perBlock; r0 < end; r0 += kRowsInFloat) {
        std::fill(floats.begin(), floats.end(), 0.0f);
        for (std::int64_t r = r0; r < std::min(end, r0 + kRowsInFloat); ++r) {
          const float* xr = x + r * channels;
          if (dy == nullptr) {
#pragma omp simd
            for (std::int64_t c = 0; c < channels; ++c) {
              const float xs = xr[c] - shift[c];
              fx[c] += xs;
              fxx[c] += xs * xs;
            }
          } else {
            const float* gr = dy + r * channels;
            const float* gt = Gated ? gate + r * channels : nullptr;
#pragma omp simd
            for (std::int64_t c = 0; c < channels; ++c) {
              const float xs = xr[c] - shift[c];
              const float g = gatedGrad<Gated>(gr, gt, c);
              fx[c] += xs;
              fxx[c] += xs * xs;
              fdy[c] += g;
              fdyx[c] += g * xs;
            }
          }
        }
        for (std::size_t k = 0; k < floats.size(); ++k)
          totals[k] += floats[k];
      }
    }
  });
  ChannelSums sums{std::vector<double>(width), std::vector<double>(width), std::vector<double>(width),
                   std::vector<double>(width)};
  std::vector<double>* targets[] = {&sums.x, &sums.xx, &sums.dy, &sums.dyx};
  for (std::int64_t block = 0; block < blocks; ++block) {
    const double* totals = partials.data() + static_cast<std::size_t>(block) * sumsPerBlock * width;
    for (std::size_t k = 0; k < sumsPerBlock; ++k) {
      for (std::size_t c = 0; c < width; ++c)
        (*targets[k])[c] += totals[k * width + c];
    }
  }
  return sums;
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

namespace {

template <bool Gated>
ChannelSums channelSumsOf(const ChannelLayout& layout, const float* x, const float* dy, const float* shift,
                          const float* gate) {
  const auto channels = static_cast<std::size_t>(layout.channels);
  ChannelSums sums{std::vector<double>(channels), std::vector<double>(channels), std::vector<double>(channels),
                   std::vector<double>(channels)};
  const std::int64_t inner = layout.inner;
  if (inner == 1)
    return rowSums<Gated>(layout, x, dy, shift, gate);  // Note [Row-major batch norm]
  parallelFor(0, layout.channels, channelGrain(layout), [&](std::int64_t c0, std::int64_t c1) {
    if (inner < kSmallPlane) {  // Note [Small planes]: per-element sums in double over the images
      const std::int64_t run = (c1 - c0) * inner;
      const std::vector<float> shifts = perElement(shift, c0, c1, inner);
      std::vector<double> ex(static_cast<std::size_t>(run)), exx(ex.size()), edy(ex.size()), edyx(ex.size());
      double *tx = ex.data(), *txx = exx.data(), *tdy = edy.data(), *tdyx = edyx.data();
      const float* sh = shifts.data();
      for (std::int64_t n = 0; n < layout.batch; ++n) {
        const std::int64_t offset = (n * layout.channels + c0) * inner;
        const float* xr = x + offset;
        if (dy == nullptr) {
#pragma omp simd
          for (std::int64_t e = 0; e < run; ++e) {
            const double xs = static_cast<double>(xr[e] - sh[e]);
            tx[e] += xs;
            txx[e] += xs * xs;
          }
        } else {
          const float* gr = dy + offset;
          const float* gt = Gated ? gate + offset : nullptr;
#pragma omp simd
          for (std::int64_t e = 0; e < run; ++e) {
            const double xs = static_cast<double>(xr[e] - sh[e]);
            const double g = gatedGrad<Gated>(gr, gt, e);
            tx[e] += xs;
            txx[e] += xs * xs;
            tdy[e] += g;
            tdyx[e] += g * xs;
          }
        }
      }
      for (std::int64_t c = c0; c < c1; ++c) {
        const auto i = static_cast<std::size_t>(c);
        for (std::int64_t e = (c - c0) * inner; e < (c - c0 + 1) * inner; ++e) {
          sums.x[i] += tx[e];
          sums.xx[i] += txx[e];
          if (dy != nullptr) {
            sums.dy[i] += tdy[e];
            sums.dyx[i] += tdyx[e];
          }
        }
      }
      return;
    }
    for (std::int64_t n = 0; n < layout.batch; ++n) {
      const std::int64_t image = n * layout.channels;
      for (std::int64_t c = c0; c < c1; ++c) {
        const std::int64_t offset = (image + c) * inner;
        const auto i = static_cast<std::size_t>(c);
        double unused0 = 0, unused1 = 0;
        sumPlane<Gated>(x + offset, dy != nullptr ? dy + offset : nullptr, Gated ? gate + offset : nullptr, inner,
                        shift[c], sums.x[i], sums.xx[i], dy != nullptr ? sums.dy[i] : unused0,
                        dy != nullptr ? sums.dyx[i] : unused1);
      }
    }
  });
  return sums;
}

}  // namespace

ChannelSums channelSums(const ChannelLayout& layout, const float* x, const float* dy, const float* shift,
                        const float* gate) {
  return gate != nullptr && dy != nullptr ? channelSumsOf<true>(layout, x, dy, shift, gate)
                                          : channelSumsOf<false>(layout, x, dy, shift, nullptr);
}

namespace {

// Runs fn(offset of the plane, channel) over every (image, channel) plane, channel blocks per task; for small planes
// (Note [Small planes]) fnRun(offset of the image's channels c0.., elements, first element's offset in the task's
// per-element coefficients) instead, after setup(c0, c1) has made those coefficients for the task.
template <typename PlaneFn, typename SetupFn, typename RunFn>
void forPlanes(const ChannelLayout& layout, PlaneFn&& fn, SetupFn&& setup, RunFn&& fnRun) {
  parallelFor(0, layout.channels, channelGrain(layout), [&](std::int64_t c0, std::int64_t c1) {
    if (layout.inner < kSmallPlane) {
      const auto coefficients = setup(c0, c1);
      for (std::int64_t n = 0; n < layout.batch; ++n)
        fnRun(coefficients, (n * layout.channels + c0) * layout.inner, (c1 - c0) * layout.inner);
      return;
    }
    for (std::int64_t n = 0; n < layout.batch; ++n) {
      const std::int64_t image = n * layout.channels;
      for (std::int64_t c = c0; c < c1; ++c)
        fn((image + c) * layout.inner, c);
    }
  });
}

template <bool Relu>
void normalizeOf(const ChannelLayout& layout, const float* x, const float* mean, const float* a, const float* b,
                 float* y) {
  const std::int64_t inner = layout.inner;
  if (inner == 1) {  // Note [Row-major batch norm]
    const std::int64_t channels = layout.channels;
    parallelFor(0, layout.batch, rowGrain(channels), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        const float* xr = x + r * channels;
        float* yr = y + r * channels;
#pragma omp simd
        for (std::int64_t c = 0; c < channels; ++c) {
          const float v = a[c] * (xr[c] - mean[c]) + b[c];
          yr[c] = Relu ? reluOf(v) : v;
        }
      }
    });
    return;
  }
  forPlanes(
      layout,
      [&](std::int64_t offset, std::int64_t c) {
        const float* xp = x + offset;
        float* yp = y + offset;
        const float ac = a[c], mc = mean[c], bc = b[c];
#pragma omp simd
        for (std::int64_t i = 0; i < inner; ++i) {
          const float v = ac * (xp[i] - mc) + bc;
          yp[i] = Relu ? reluOf(v) : v;
        }
      },
      [&](std::int64_t c0, std::int64_t c1) {
        return std::array<std::vector<float>, 3>{perElement(a, c0, c1, inner), perElement(mean, c0, c1, inner),
                                                 perElement(b, c0, c1, inner)};
      },
      [&](const std::array<std::vector<float>, 3>& k, std::int64_t offset, std::int64_t run) {
        const float* xi = x + offset;
        float* yi = y + offset;
        const float *ae = k[0].data(), *me = k[1].data(), *be = k[2].data();
#pragma omp simd
        for (std::int64_t e = 0; e < run; ++e) {
          const float v = ae[e] * (xi[e] - me[e]) + be[e];
          yi[e] = Relu ? reluOf(v) : v;
        }
      });
}

template <bool Gated>
void normalizeGradOf(const ChannelLayout& layout, const float* dy, const float* x, const float* mean, const float* a,
                     const float* b, const float* c, float* dx, const float* gate) {
  const std::int64_t inner = layout.inner;
  if (inner == 1) {  // Note [Row-major batch norm]
    const std::int64_t channels = layout.channels;
    parallelFor(0, layout.batch, rowGrain(channels), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        const float* gr = dy + r * channels;
        const float* gt = Gated ? gate + r * channels : nullptr;
        const float* xr = x + r * channels;
        float* out = dx + r * channels;
#pragma omp simd
        for (std::int64_t k = 0; k < channels; ++k)
          out[k] = a[k] * gatedGrad<Gated>(gr, gt, k) + b[k] * (xr[k] - mean[k]) + c[k];
      }
    });
    return;
  }
  forPlanes(
      layout,
      [&](std::int64_t offset, std::int64_t ch) {
        const float* gp = dy + offset;
        const float* gt = Gated ? gate + offset : nullptr;
        const float* xp = x + offset;
        float* out = dx + offset;
        const float ac = a[ch], bc = b[ch], cc = c[ch], mc = mean[ch];
#pragma omp simd
        for (std::int64_t i = 0; i < inner; ++i)
          out[i] = ac * gatedGrad<Gated>(gp, gt, i) + bc * (xp[i] - mc) + cc;
      },
      [&](std::int64_t c0, std::int64_t c1) {
        return std::array<std::vector<float>, 4>{perElement(a, c0, c1, inner), perElement(b, c0, c1, inner),
                                                 perElement(c, c0, c1, inner), perElement(mean, c0, c1, inner)};
      },
      [&](const std::array<std::vector<float>, 4>& k, std::int64_t offset, std::int64_t run) {
        const float* gi = dy + offset;
        const float* gt = Gated ? gate + offset : nullptr;
        const float* xi = x + offset;
        float* out = dx + offset;
        const float *ae = k[0].data(), *be = k[1].data(), *ce = k[2].data(), *me = k[3].data();
#pragma omp simd
        for (std::int64_t e = 0; e < run; ++e)
          out[e] = ae[e] * gatedGrad<Gated>(gi, gt, e) + be[e] * (xi[e] - me[e]) + ce[e];
      });
}

}  // namespace

void normalize(const ChannelLayout& layout, const float* x, const float* mean, const float* a, const float* b, float* y,
               bool relu) {
  if (relu) {
    normalizeOf<true>(layout, x, mean, a, b, y);
  } else {
    normalizeOf<false>(layout, x, mean, a, b, y);
  }
}

void normalizeGrad(const ChannelLayout& layout, const float* dy, const float* x, const float* mean, const float* a,
                   const float* b, const float* c, float* dx, const float* gate) {
  if (gate != nullptr) {
    normalizeGradOf<true>(layout, dy, x, mean, a, b, c, dx, gate);
  } else {
    normalizeGradOf<false>(layout, dy, x, mean, a, b, c, dx, nullptr);
  }
}

}  // namespace strata::cpu
