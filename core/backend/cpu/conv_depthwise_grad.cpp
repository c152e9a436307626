#include "conv_depthwise_grad.h"

#include <algorithm>
#include <vector>

#include <immintrin.h>

#include "dnnl_layout_detour.h"
#include "shape_ops_common.h"
#include "small_group_lanes.h"
#include "strata/thread_pool.h"

namespace strata::cpu {

namespace {}  // namespace

std::optional<DepthwiseWeightGradient> DepthwiseWeightGradient::plan(const Shape& x, const Shape& w, std::int64_t group,
                                                                     const WindowGeometry& geometry,
                                                                     bool channelsLast) {
  if (x.size() != 4 || w.size() != 4 || group < 2 || x[1] % group != 0)
    return std::nullopt;
  const bool depthwise = x[1] == group && w[1] == 1 && w[0] % group == 0;
  const std::int64_t perGroup = depthwise ? 1 : smallGroupSize(x, w, group);  // Note [Small-group weight gradient]
  if (perGroup == 0)
    return std::nullopt;
  DepthwiseWeightGradient d;
  d.perGroup_ = perGroup;
  d.channelsLast_ = channelsLast;
  d.images_ = x[0];
  d.channels_ = x[1];
  d.outChannels_ = w[0];
  d.window_ = PlaneWindow::of(x, w, geometry);
  return d;
}

std::string DepthwiseWeightGradient::name() const {
  return perGroup_ == 1 ? "depthwise loop" : fmt::format("small-group loop ({} channels per group)", perGroup_);
}

std::size_t DepthwiseWeightGradient::scratchBytes() const {
  return channelsLast_ ? 0 : floatRegionBytes(numElements(xShape())) + floatRegionBytes(numElements(dyShape()));
}

void DepthwiseWeightGradient::run(const float* dy, const float* x, float* dw, float* db, char* scratch) const {
  if (channelsLast_) {
    runChannelsLast(dy, x, dw, db);
    return;
  }
  auto* xRows = reinterpret_cast<float*>(scratch);
  auto* dyRows = reinterpret_cast<float*>(scratch + floatRegionBytes(numElements(xShape())));
  const std::vector<std::int64_t> toChannelsLast = {0, 2, 3, 1};
  shape_detail::transposeBytes(xRows, x, xShape(), toChannelsLast, sizeof(float));
  shape_detail::transposeBytes(dyRows, dy, dyShape(), toChannelsLast, sizeof(float));
  runChannelsLast(dyRows, xRows, dw, db);
}

void DepthwiseWeightGradient::runChannelsLast(const float* dy, const float* x, float* dw, float* db) const {
  switch (perGroup_) {
    case 2:
      runSmallGroups<2>(dy, x, dw, db);
      return;
    case 4:
      runSmallGroups<4>(dy, x, dw, db);
      return;
    case 8:
      runSmallGroups<8>(dy, x, dw, db);
      return;
    default:
      break;
  }
  constexpr std::int64_t kBlock = 64;  // channels per task: one row of accumulators per tap
  const std::int64_t multiplier = outChannels_ / channels_;
  const std::int64_t taps = window_.kernel[0] * window_.kernel[1];
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
        for (std::int64_t oh = 0; oh < window_.out[0]; ++oh) {
          for (std::int64_t ow = 0; ow < window_.out[1]; ++ow) {
            const float* g = dy + ((n * window_.out[0] + oh) * window_.out[1] + ow) * outChannels_ + o0;
#pragma omp simd
            for (std::int64_t k = 0; k < width; ++k)
              biasSums[k] += g[k];
            for (std::int64_t i = 0; i < window_.kernel[0]; ++i) {
              const std::int64_t ih = window_.inputAt(0, oh, i);
              if (ih < 0)
                continue;
              for (std::int64_t j = 0; j < window_.kernel[1]; ++j) {
                const std::int64_t iw = window_.inputAt(1, ow, j);
                if (iw < 0)
                  continue;
                const float* pixel = x + ((n * window_.in[0] + ih) * window_.in[1] + iw) * channels_;
                float* sums = image.data() + (i * window_.kernel[1] + j) * kBlock;
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

// Note [Small-group weight gradient]: eight output channels at a time (8 / PerGroup whole groups, whose input
// channels are the same eight), one tap at a time with PerGroup accumulators in registers: dW[o, c', tap] sums
// dY[o] x X[first input of o's group + c'] over an image's pixels, the X vector permuted so that each lane holds its
// group's input c'. Summed in float over an image and in double across images, as the depthwise loop.
template <int PerGroup>
void DepthwiseWeightGradient::runSmallGroups(const float* dy, const float* x, float* dw, float* db) const {
  const std::int64_t taps = window_.kernel[0] * window_.kernel[1];
  const std::int64_t blocks = outChannels_ / 8;
  parallelFor(0, blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<double> total(static_cast<std::size_t>((taps * PerGroup + 1) * 8));  // [tap][c'][lane], then dB's
    for (std::int64_t block = begin; block < end; ++block) {
      const std::int64_t o0 = block * 8;
      std::fill(total.begin(), total.end(), 0.0);
      const auto addToTotal = [&](std::int64_t row, __m256 sums) {
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, sums);
        for (int l = 0; l < 8; ++l)
          total[static_cast<std::size_t>(row * 8 + l)] += lanes[l];
      };
      for (std::int64_t n = 0; n < images_; ++n) {
        const float* image = dy + n * window_.out[0] * window_.out[1] * outChannels_ + o0;
        __m256 bias = _mm256_setzero_ps();
        for (std::int64_t p = 0; p < window_.out[0] * window_.out[1]; ++p)
          bias = _mm256_add_ps(bias, _mm256_loadu_ps(image + p * outChannels_));
        addToTotal(taps * PerGroup, bias);
        for (std::int64_t i = 0; i < window_.kernel[0]; ++i) {
          for (std::int64_t j = 0; j < window_.kernel[1]; ++j) {
            __m256 sums[PerGroup];
            for (int c = 0; c < PerGroup; ++c)
              sums[c] = _mm256_setzero_ps();
            for (std::int64_t oh = 0; oh < window_.out[0]; ++oh) {
              const std::int64_t ih = window_.inputAt(0, oh, i);
              if (ih < 0)
                continue;
              for (std::int64_t ow = 0; ow < window_.out[1]; ++ow) {
                const std::int64_t iw = window_.inputAt(1, ow, j);
                if (iw < 0)
                  continue;
                const __m256 g = _mm256_loadu_ps(image + (oh * window_.out[1] + ow) * outChannels_);
                const __m256 pixel =
                    _mm256_loadu_ps(x + ((n * window_.in[0] + ih) * window_.in[1] + iw) * channels_ + o0);
                for (int c = 0; c < PerGroup; ++c)
                  sums[c] = _mm256_fmadd_ps(g, groupLane<PerGroup>(pixel, c), sums[c]);
              }
            }
            for (int c = 0; c < PerGroup; ++c)
              addToTotal((i * window_.kernel[1] + j) * PerGroup + c, sums[c]);
          }
        }
      }
      for (std::int64_t l = 0; l < 8; ++l) {
        const std::int64_t o = o0 + l;
        if (dw != nullptr) {
          for (std::int64_t t = 0; t < taps; ++t) {
            for (std::int64_t c = 0; c < PerGroup; ++c) {
              dw[groupedWeightAt(o, c, t, taps, PerGroup, channelsLast_)] =
                  static_cast<float>(total[static_cast<std::size_t>((t * PerGroup + c) * 8 + l)]);
            }
          }
        }
        if (db != nullptr)
          db[o] = static_cast<float>(total[static_cast<std::size_t>(taps * PerGroup * 8 + l)]);
      }
    }
  });
}

}  // namespace strata::cpu
