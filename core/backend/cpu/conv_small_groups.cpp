#include "conv_small_groups.h"

#include <algorithm>
#include <vector>

#include <immintrin.h>

#include "dnnl_layout_detour.h"
#include "shape_ops_common.h"
#include "small_group_lanes.h"
#include "strata/thread_pool.h"

namespace strata::cpu {
namespace {

const std::vector<std::int64_t> kToChannelsLast{0, 2, 3, 1};
const std::vector<std::int64_t> kToChannelsFirst{0, 3, 1, 2};

}  // namespace

PlaneWindow PlaneWindow::of(const Shape& x, const Shape& w, const WindowGeometry& geometry) {
  PlaneWindow p;
  for (std::size_t i = 0; i < 2; ++i) {
    p.in[i] = x[2 + i];
    p.out[i] = geometry.output[i];
    p.kernel[i] = w[2 + i];
    p.stride[i] = geometry.strides[i];
    p.dilation[i] = geometry.dilations[i];
    p.padBegin[i] = geometry.padBegin[i];
  }
  return p;
}

std::int64_t smallGroupSize(const Shape& x, const Shape& w, std::int64_t group) {
  if (x.size() != 4 || w.size() != 4 || group < 2 || x[1] % group != 0)
    return 0;
  const std::int64_t perGroup = x[1] / group;
  const bool fits =
      (perGroup == 2 || perGroup == 4 || perGroup == 8) && w[1] == perGroup && w[0] == x[1] && x[1] % 8 == 0;
  return fits ? perGroup : 0;
}

std::optional<SmallGroupConv> SmallGroupConv::plan(const Shape& x, const Shape& w, std::int64_t group,
                                                   const WindowGeometry& geometry, bool channelsLast) {
  const std::int64_t perGroup = smallGroupSize(x, w, group);
  if (perGroup == 0)
    return std::nullopt;
  SmallGroupConv c;
  c.channelsLast_ = channelsLast;
  c.images_ = x[0];
  c.channels_ = x[1];
  c.perGroup_ = perGroup;
  c.window_ = PlaneWindow::of(x, w, geometry);
  return c;
}

std::string SmallGroupConv::implementation() const {
  return fmt::format("small-group loop ({} channels per group)", perGroup_);
}

std::size_t SmallGroupConv::scratchBytes() const {
  const std::int64_t packed = window_.kernel[0] * window_.kernel[1] * perGroup_ * channels_;
  const std::int64_t activations =
      channelsLast_ ? 0 : images_ * channels_ * (window_.in[0] * window_.in[1] + window_.out[0] * window_.out[1]);
  return floatRegionBytes(packed) + floatRegionBytes(activations);
}

void SmallGroupConv::forward(const float* x, const float* w, const float* bias, float* y, char* scratch) const {
  runPass(Pass::Forward, x, w, bias, y, scratch);
}

void SmallGroupConv::dataGradient(const float* dy, const float* w, float* dx, char* scratch) const {
  runPass(Pass::Data, dy, w, nullptr, dx, scratch);
}

void SmallGroupConv::pack(Pass pass, const float* w, float* packed) const {
  const std::int64_t taps = window_.kernel[0] * window_.kernel[1];
  for (std::int64_t t = 0; t < taps; ++t) {
    for (std::int64_t c = 0; c < perGroup_; ++c) {
      for (std::int64_t lane = 0; lane < channels_; ++lane) {
        // Forward: output `lane` times its group's input c. Data: input `lane` gets output c of its group times
        // the weight joining them, W[group start + c, lane's place in its group].
        const std::int64_t groupStart = lane / perGroup_ * perGroup_;
        const std::int64_t o = pass == Pass::Forward ? lane : groupStart + c;
        const std::int64_t i = pass == Pass::Forward ? c : lane - groupStart;
        packed[(t * perGroup_ + c) * channels_ + lane] = w[groupedWeightAt(o, i, t, taps, perGroup_, channelsLast_)];
      }
    }
  }
}

void SmallGroupConv::runPass(Pass pass, const float* source, const float* w, const float* bias, float* target,
                             char* scratch) const {
  auto* packed = reinterpret_cast<float*>(scratch);
  pack(pass, w, packed);
  const Shape inShape{images_, channels_, window_.in[0], window_.in[1]},
      outShape{images_, channels_, window_.out[0], window_.out[1]};
  const Shape& sourceShape = pass == Pass::Forward ? inShape : outShape;
  const Shape& targetShape = pass == Pass::Forward ? outShape : inShape;
  const float* from = source;
  float* to = target;
  if (!channelsLast_) {
    auto* sourceRows = reinterpret_cast<float*>(
        scratch + floatRegionBytes(window_.kernel[0] * window_.kernel[1] * perGroup_ * channels_));
    to = sourceRows + numElements(sourceShape);
    shape_detail::transposeBytes(sourceRows, source, sourceShape, kToChannelsLast, sizeof(float));
    from = sourceRows;
  }
  switch (perGroup_) {
    case 2:
      run<2>(pass, from, packed, bias, to);
      break;
    case 4:
      run<4>(pass, from, packed, bias, to);
      break;
    default:
      run<8>(pass, from, packed, bias, to);
      break;
  }
  if (!channelsLast_) {
    const Shape targetRows{targetShape[0], targetShape[2], targetShape[3], targetShape[1]};
    shape_detail::transposeBytes(target, to, targetRows, kToChannelsFirst, sizeof(float));
  }
}

// One row of target pixels per task: each pixel's eight-channel blocks summed over the taps that reach a source
// pixel. Forward: source pixel = target * stride + tap * dilation - pad. Data: the output pixels whose window puts
// this input pixel at the tap, (target + pad - tap * dilation) / stride where that divides.
template <int PerGroup>
void SmallGroupConv::run(Pass pass, const float* source, const float* packed, const float* bias, float* target) const {
  const bool forward = pass == Pass::Forward;
  const std::int64_t* sourceSize = forward ? window_.in : window_.out;
  const std::int64_t* targetSize = forward ? window_.out : window_.in;
  const std::int64_t blocks = channels_ / 8;
  // The source coordinate along `dim` for target coordinate `t` and tap `k`, or -1.
  const auto sourceOf = [&](int dim, std::int64_t t, std::int64_t k) {
    return forward ? window_.inputAt(dim, t, k) : window_.outputAt(dim, t, k);
  };
  parallelFor(0, images_ * targetSize[0], 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      const std::int64_t n = row / targetSize[0], th = row % targetSize[0];
      for (std::int64_t tw = 0; tw < targetSize[1]; ++tw) {
        float* out = target + ((n * targetSize[0] + th) * targetSize[1] + tw) * channels_;
        for (std::int64_t block = 0; block < blocks; ++block) {
          __m256 sum = bias != nullptr ? _mm256_loadu_ps(bias + 8 * block) : _mm256_setzero_ps();
          for (std::int64_t i = 0; i < window_.kernel[0]; ++i) {
            const std::int64_t sh = sourceOf(0, th, i);
            if (sh < 0)
              continue;
            for (std::int64_t j = 0; j < window_.kernel[1]; ++j) {
              const std::int64_t sw = sourceOf(1, tw, j);
              if (sw < 0)
                continue;
              const __m256 pixel =
                  _mm256_loadu_ps(source + ((n * sourceSize[0] + sh) * sourceSize[1] + sw) * channels_ + 8 * block);
              const float* weights = packed + ((i * window_.kernel[1] + j) * PerGroup) * channels_ + 8 * block;
              for (int c = 0; c < PerGroup; ++c)
                sum = _mm256_fmadd_ps(_mm256_loadu_ps(weights + c * channels_), groupLane<PerGroup>(pixel, c), sum);
            }
          }
          _mm256_storeu_ps(out + 8 * block, sum);
        }
      }
    }
  });
}

}  // namespace strata::cpu
