#include "conv_whole_map.h"

#include <algorithm>
#include <cstring>

#include "dnnl_layout_detour.h"
#include "shape_ops_common.h"
#include "strata/thread_pool.h"

namespace strata::cpu {
namespace {

// For each (o, p) pair, the tap it meets as a flat index into the kernel's taps (row-major), at o x P + p.
std::vector<std::int64_t> pairTaps(const WindowGeometry& g, const std::vector<std::int64_t>& in, std::int64_t outPixels,
                                   std::int64_t inPixels) {
  const std::size_t dims = g.kernel.size();
  std::vector<std::int64_t> taps(static_cast<std::size_t>(outPixels * inPixels));
  std::vector<std::int64_t> o(dims, 0);
  for (std::int64_t oi = 0; oi < outPixels; ++oi) {
    std::vector<std::int64_t> p(dims, 0);
    for (std::int64_t pi = 0; pi < inPixels; ++pi) {
      std::int64_t tap = 0;
      for (std::size_t d = 0; d < dims; ++d)
        tap = tap * g.kernel[d] + p[d] - (o[d] * g.strides[d] - g.padBegin[d]);
      taps[static_cast<std::size_t>(oi * inPixels + pi)] = tap;
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

std::unique_ptr<WholeMapConv> WholeMapConv::plan(const Shape& x, const Shape& w, std::int64_t group,
                                                 const WindowGeometry& g, bool bias, bool channelsLast,
                                                 std::size_t maxBytes) {
  if (group != 1 || x.size() < 3)
    return nullptr;
  const std::size_t dims = g.kernel.size();
  const std::vector<std::int64_t> in(x.begin() + 2, x.end());
  std::int64_t outPixels = 1, inPixels = 1;
  for (std::size_t d = 0; d < dims; ++d) {
    if (g.dilations[d] != 1)
      return nullptr;
    // Every window starts at or before 0 (the last one does) and ends at or after in - 1 (the first one does).
    const std::int64_t lastStart = (g.output[d] - 1) * g.strides[d] - g.padBegin[d];
    if (lastStart > 0 || -g.padBegin[d] + g.kernel[d] - 1 < in[d] - 1)
      return nullptr;
    outPixels *= g.output[d];
    inPixels *= in[d];
  }
  Shape spreadWeight{w[0] * outPixels, x[1]};
  spreadWeight.insert(spreadWeight.end(), in.begin(), in.end());
  const std::size_t spreadBytes = static_cast<std::size_t>(numElements(spreadWeight)) * sizeof(float);
  if (outPixels == 1 || spreadBytes > maxBytes)
    return nullptr;
  WindowGeometry whole;  // the kernel is the input map: one output pixel
  whole.kernel = in;
  whole.strides.assign(dims, 1);
  whole.dilations.assign(dims, 1);
  whole.padBegin.assign(dims, 0);
  whole.padEnd.assign(dims, 0);
  whole.output.assign(dims, 1);
  std::unique_ptr<ConvGemm> gemm = ConvGemm::plan(x, spreadWeight, 1, whole, bias, true);
  if (gemm == nullptr)
    return nullptr;
  std::unique_ptr<WholeMapConv> m(new WholeMapConv());
  m->weight_ = w;
  m->geometry_ = g;
  m->channelsLast_ = channelsLast;
  m->images_ = x[0];
  m->channels_ = x[1];
  m->outPixels_ = outPixels;
  m->inPixels_ = inPixels;
  m->taps_ = pairTaps(g, in, outPixels, inPixels);
  const std::size_t inputBytes = static_cast<std::size_t>(numElements(x)) * sizeof(float);
  m->xLast_ = alignUp(gemm->scratchBytes());
  m->spread_ = m->xLast_ + alignUp(inputBytes);
  m->bias_ = m->spread_ + alignUp(spreadBytes);
  m->forwardBytes_ = m->bias_ + alignUp(static_cast<std::size_t>(spreadWeight[0]) * sizeof(float));
  m->dxLast_ = m->forwardBytes_;
  m->spreadGrad_ = m->dxLast_ + alignUp(inputBytes);
  m->backwardBytes_ = m->spreadGrad_ + alignUp(spreadBytes);
  m->gemm_ = std::move(gemm);
  return m;
}

std::string WholeMapConv::implementation() const {
  return gemm_->implementation() + "; whole-map windows";
}

void WholeMapConv::forward(const float* x, const float* w, const float* b, float* y, char* scratch) const {
  auto* xLast = reinterpret_cast<float*>(scratch + xLast_);
  auto* spread = reinterpret_cast<float*>(scratch + spread_);
  auto* biasRow = reinterpret_cast<float*>(scratch + bias_);
  if (!channelsLast_)
    swapInnerAxes(x, xLast, channels_, inPixels_);
  spreadWeights(w, spread);
  if (b != nullptr)
    spreadBias(b, biasRow);
  // Y [N, K x O] is Y's own NCHW bytes ([N, O x K] its NHWC ones).
  gemm_->forward(channelsLast_ ? x : xLast, spread, b != nullptr ? biasRow : nullptr, y, scratch);
}

void WholeMapConv::backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db,
                            char* scratch) const {
  auto* xLast = reinterpret_cast<float*>(scratch + xLast_);
  auto* dxLast = reinterpret_cast<float*>(scratch + dxLast_);
  auto* spread = reinterpret_cast<float*>(scratch + spread_);
  auto* spreadDw = reinterpret_cast<float*>(scratch + spreadGrad_);
  auto* spreadDb = reinterpret_cast<float*>(scratch + bias_);
  if (dw != nullptr && !channelsLast_)
    swapInnerAxes(x, xLast, channels_, inPixels_);
  if (dx != nullptr)
    spreadWeights(w, spread);
  // Channels-last X and dX are X' and dX' themselves.
  gemm_->backward(dy, dw != nullptr ? (channelsLast_ ? x : xLast) : nullptr, dx != nullptr ? spread : nullptr,
                  dx != nullptr ? (channelsLast_ ? dx : dxLast) : nullptr, dw != nullptr ? spreadDw : nullptr,
                  db != nullptr ? spreadDb : nullptr, scratch);
  if (dx != nullptr && !channelsLast_)
    swapInnerAxes(dxLast, dx, inPixels_, channels_);
  if (dw != nullptr)
    foldWeightGradient(spreadDw, dw);
  if (db != nullptr)
    foldBiasGradient(spreadDb, db);
}

void WholeMapConv::swapInnerAxes(const float* from, float* to, std::int64_t rows, std::int64_t columns) const {
  shape_detail::transposeBytes(to, from, {images_, rows, columns}, {0, 2, 1}, sizeof(float));
}

void WholeMapConv::spreadWeights(const float* w, float* spread) const {
  const std::int64_t filters = weight_[0], kernel = numElements(weight_) / (filters * channels_);
  // Per filter: its [C, taps] block turned [taps, C] (small, in cache; a KRSC filter is that already), then rows
  // of W' as runs of C values.
  parallelFor(0, filters, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> byTap(static_cast<std::size_t>(kernel * channels_));
    for (std::int64_t k = begin; k < end; ++k) {
      const float* block = w + k * channels_ * kernel;
      if (!channelsLast_) {
        for (std::int64_t c = 0; c < channels_; ++c)
          for (std::int64_t t = 0; t < kernel; ++t)
            byTap[static_cast<std::size_t>(t * channels_ + c)] = block[c * kernel + t];
      }
      const float* taps = channelsLast_ ? block : byTap.data();
      for (std::int64_t o = 0; o < outPixels_; ++o) {
        float* row = spread + rowOf(k, o) * inPixels_ * channels_;
        for (std::int64_t p = 0; p < inPixels_; ++p) {
          const float* run = taps + taps_[static_cast<std::size_t>(o * inPixels_ + p)] * channels_;
          std::copy(run, run + channels_, row + p * channels_);
        }
      }
    }
  });
}

void WholeMapConv::spreadBias(const float* b, float* spread) const {
  for (std::int64_t k = 0; k < weight_[0]; ++k) {
    for (std::int64_t o = 0; o < outPixels_; ++o)
      spread[rowOf(k, o)] = b[k];
  }
}

void WholeMapConv::foldWeightGradient(const float* spread, float* dw) const {
  const std::int64_t filters = weight_[0], kernel = numElements(weight_) / (filters * channels_);
  // Per filter: runs of C values added into its [taps, C] sums, then turned back into [C, taps].
  parallelFor(0, filters, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> byTap(static_cast<std::size_t>(kernel * channels_));
    for (std::int64_t k = begin; k < end; ++k) {
      std::fill(byTap.begin(), byTap.end(), 0.0f);
      for (std::int64_t o = 0; o < outPixels_; ++o) {
        const float* row = spread + rowOf(k, o) * inPixels_ * channels_;
        for (std::int64_t p = 0; p < inPixels_; ++p) {
          float* sum = byTap.data() + taps_[static_cast<std::size_t>(o * inPixels_ + p)] * channels_;
          const float* run = row + p * channels_;
          for (std::int64_t c = 0; c < channels_; ++c)
            sum[c] += run[c];
        }
      }
      float* block = dw + k * channels_ * kernel;
      if (channelsLast_) {
        std::copy(byTap.begin(), byTap.end(), block);
        continue;
      }
      for (std::int64_t c = 0; c < channels_; ++c)
        for (std::int64_t t = 0; t < kernel; ++t)
          block[c * kernel + t] = byTap[static_cast<std::size_t>(t * channels_ + c)];
    }
  });
}

void WholeMapConv::foldBiasGradient(const float* spread, float* db) const {
  for (std::int64_t k = 0; k < weight_[0]; ++k) {
    float sum = 0.0f;
    for (std::int64_t o = 0; o < outPixels_; ++o)
      sum += spread[rowOf(k, o)];
    db[k] = sum;
  }
}

}  // namespace strata::cpu
