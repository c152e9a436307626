// Note [Winograd convolutions] (conv_winograd.h): F(4x4, 3x3) with its transforms as vectorised loops and its 36
// GEMMs as one batched oneDNN matmul.

#include "conv_winograd.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include "strata/thread_pool.h"

namespace strata::cpu {
namespace {

using dnnl::memory;

constexpr std::int64_t kOut = 4;      // outputs per tile side
constexpr std::int64_t kPoints = 36;  // 6x6 transformed points per tile
constexpr std::size_t kAlign = 64;

std::size_t alignUp(std::size_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

// The transforms, each applied to six (or three) rows of n floats at once, element by element: a row holds one point
// of a tile (or one tap of a filter) for many channels side by side, so the loops vectorise over channels.

// r = B^T d for F(4x4, 3x3) (Lavin and Gray's B).
void inputTransform(const float* const d[6], float* const r[6], std::int64_t n) {
  const float *d0 = d[0], *d1 = d[1], *d2 = d[2], *d3 = d[3], *d4 = d[4], *d5 = d[5];
  float *r0 = r[0], *r1 = r[1], *r2 = r[2], *r3 = r[3], *r4 = r[4], *r5 = r[5];
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float a0 = d0[i], a1 = d1[i], a2 = d2[i], a3 = d3[i], a4 = d4[i], a5 = d5[i];
    r0[i] = 4.0f * a0 - 5.0f * a2 + a4;
    r1[i] = -4.0f * (a1 + a2) + a3 + a4;
    r2[i] = 4.0f * (a1 - a2) - a3 + a4;
    r3[i] = 2.0f * (a3 - a1) - a2 + a4;
    r4[i] = 2.0f * (a1 - a3) - a2 + a4;
    r5[i] = 4.0f * a1 - 5.0f * a3 + a5;
  }
}

// r = A^T m (six points to four outputs).
void outputTransform(const float* const m[6], float* const r[4], std::int64_t n) {
  const float *m0 = m[0], *m1 = m[1], *m2 = m[2], *m3 = m[3], *m4 = m[4], *m5 = m[5];
  float *r0 = r[0], *r1 = r[1], *r2 = r[2], *r3 = r[3];
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float a1 = m1[i], a2 = m2[i], a3 = m3[i], a4 = m4[i];
    const float sum12 = a1 + a2, diff12 = a1 - a2, sum34 = a3 + a4, diff34 = a3 - a4;
    r0[i] = m0[i] + sum12 + sum34;
    r1[i] = diff12 + 2.0f * diff34;
    r2[i] = sum12 + 4.0f * sum34;
    r3[i] = diff12 + 8.0f * diff34 + m5[i];
  }
}

// r = G g (three filter taps to six points).
void filterTransform(const float* const g[3], float* const r[6], std::int64_t n) {
  const float *g0 = g[0], *g1 = g[1], *g2 = g[2];
  float *r0 = r[0], *r1 = r[1], *r2 = r[2], *r3 = r[3], *r4 = r[4], *r5 = r[5];
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float a0 = g0[i], a1 = g1[i], a2 = g2[i];
    r0[i] = 0.25f * a0;
    r1[i] = -(a0 + a1 + a2) / 6.0f;
    r2[i] = -(a0 - a1 + a2) / 6.0f;
    r3[i] = a0 / 24.0f + a1 / 12.0f + a2 / 6.0f;
    r4[i] = a0 / 24.0f - a1 / 12.0f + a2 / 6.0f;
    r5[i] = a2;
  }
}

// Whether the GEMMs are large enough to repay the transforms. Measured per layer of VGG16 at 64x64, batch 8 (64 to 512
// channels on 64x64 down to 4x4 maps) with `strata run --profile` and `strata train --profile`, STRATA_CPU_WINOGRAD=1
// against =0 (2026-11-27, Zen 5, 2 threads): 1.4-2x faster from 64 channels on 16x16 maps up, even or slower on 8x8
// maps (few tiles, and 512x512 filters transformed on every run) and with 3 input channels.
bool pays(std::int64_t inputChannels, std::int64_t outputChannels, std::int64_t outputPixels) {
  return inputChannels >= 64 && outputChannels >= 64 && outputPixels >= 16 * 16;
}

}  // namespace

std::unique_ptr<ConvWinograd> ConvWinograd::plan(Role role, const Shape& x, const Shape& w, std::int64_t group,
                                                 const WindowGeometry& geometry, bool channelsLast) {
  const char* env = std::getenv("STRATA_CPU_WINOGRAD");
  const std::string_view mode = env != nullptr ? env : "";
  if (mode == "0")
    return nullptr;
  if (x.size() != 4 || w.size() != 4 || group != 1 || geometry.kernel != std::vector<std::int64_t>{3, 3} ||
      geometry.strides != std::vector<std::int64_t>{1, 1} || geometry.dilations != std::vector<std::int64_t>{1, 1}) {
    return nullptr;
  }
  for (std::size_t i = 0; i < 2; ++i) {
    if (geometry.padBegin[i] < 0 || geometry.padBegin[i] > 2 || geometry.padEnd[i] < 0 || geometry.padEnd[i] > 2)
      return nullptr;
  }
  std::unique_ptr<ConvWinograd> p(new ConvWinograd());
  p->role_ = role;
  p->channelsLast_ = channelsLast;
  p->n_ = x[0];
  if (role == Role::Forward) {
    p->c_ = x[1];
    p->o_ = w[0];
    p->h_ = x[2];
    p->w_ = x[3];
    p->oh_ = geometry.output[0];
    p->ow_ = geometry.output[1];
    p->padTop_ = geometry.padBegin[0];
    p->padLeft_ = geometry.padBegin[1];
  } else {
    // dX[y] = sum_i W[i] dY[y + pad - i] = sum_i' W[2 - i'] dY[y - (2 - pad) + i']: a convolution padded by 2 - pad.
    p->c_ = w[0];
    p->o_ = x[1];
    p->h_ = geometry.output[0];
    p->w_ = geometry.output[1];
    p->oh_ = x[2];
    p->ow_ = x[3];
    p->padTop_ = 2 - geometry.padBegin[0];
    p->padLeft_ = 2 - geometry.padBegin[1];
  }
  if (mode != "1" && !pays(p->c_, p->o_, p->oh_ * p->ow_))
    return nullptr;
  p->tilesH_ = (p->oh_ + kOut - 1) / kOut;
  p->tilesW_ = (p->ow_ + kOut - 1) / kOut;
  p->tiles_ = p->n_ * p->tilesH_ * p->tilesW_;

  // M[k] [T, O] = V[k] [T, C] U[k] [C, O]: the GEMMs run with the tiles as rows (oneDNN's matmul ran the transposed
  // form [O, C] x [C, T], tiles as columns, at 60-75% of the speed), and the transforms vectorise over channels.
  const memory::desc filterDesc({kPoints, p->c_, p->o_}, memory::data_type::f32, memory::format_tag::abc);
  const memory::desc inputDesc({kPoints, p->tiles_, p->c_}, memory::data_type::f32, memory::format_tag::abc);
  const memory::desc productDesc({kPoints, p->tiles_, p->o_}, memory::data_type::f32, memory::format_tag::abc);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(inputDesc, filterDesc, productDesc), userScratchpadAttr(),
                                  dnnlEngine());
  p->matmul_ = dnnl::matmul(pd);
  p->implementation_ = pd.impl_info_str();
  p->src_ = memory(inputDesc, dnnlEngine(), nullptr);
  p->weights_ = memory(filterDesc, dnnlEngine(), nullptr);
  p->dst_ = memory(productDesc, dnnlEngine(), nullptr);
  std::size_t offset = 0;
  auto place = [&offset](std::size_t bytes) {
    const std::size_t at = offset;
    offset += alignUp(bytes);
    return at;
  };
  // Channels-first tensors are reordered to and from channels-last copies around the transforms. The input's copy
  // is dead once V is made, so it shares M's place; the output's is made once M is read, so it shares V's.
  const memory::dims in{p->n_, p->c_, p->h_, p->w_}, out{p->n_, p->o_, p->oh_, p->ow_};
  const std::size_t copyIn = channelsLast ? 0 : static_cast<std::size_t>(numElements(in)) * sizeof(float);
  const std::size_t copyOut = channelsLast ? 0 : static_cast<std::size_t>(numElements(out)) * sizeof(float);
  p->vOffset_ = p->outputCopyOffset_ = place(std::max(inputDesc.get_size(), copyOut));
  p->mOffset_ = p->inputCopyOffset_ = place(std::max(productDesc.get_size(), copyIn));
  p->uOffset_ = place(filterDesc.get_size());
  p->matmulScratchBytes_ = pd.scratchpad_desc().get_size();
  p->matmulScratchOffset_ = place(p->matmulScratchBytes_);
  if (!channelsLast) {
    const memory::desc inFirst(in, memory::data_type::f32, memory::format_tag::nchw);
    const memory::desc inLast(in, memory::data_type::f32, memory::format_tag::nhwc);
    const memory::desc outFirst(out, memory::data_type::f32, memory::format_tag::nchw);
    const memory::desc outLast(out, memory::data_type::f32, memory::format_tag::nhwc);
    p->inputFirst_ = memory(inFirst, dnnlEngine(), nullptr);
    p->inputLast_ = memory(inLast, dnnlEngine(), nullptr);
    p->outputFirst_ = memory(outFirst, dnnlEngine(), nullptr);
    p->outputLast_ = memory(outLast, dnnlEngine(), nullptr);
    p->toLast_ = dnnl::reorder(p->inputFirst_, p->inputLast_);
    p->toFirst_ = dnnl::reorder(p->outputLast_, p->outputFirst_);
  }
  p->scratchBytes_ = offset;
  return p;
}

std::string ConvWinograd::implementation() const {
  return "Winograd F(4x4, 3x3), 36 GEMMs on oneDNN " + implementation_;
}

void ConvWinograd::run(const float* input, const float* w, const float* bias, float* output, char* scratch,
                       std::optional<std::pair<float, float>> clamp) {
  auto* v = reinterpret_cast<float*>(scratch + vOffset_);
  auto* m = reinterpret_cast<float*>(scratch + mOffset_);
  auto* u = reinterpret_cast<float*>(scratch + uOffset_);
  const float* in = input;
  float* out = output;
  if (!channelsLast_) {
    in = reinterpret_cast<const float*>(scratch + inputCopyOffset_);
    out = reinterpret_cast<float*>(scratch + outputCopyOffset_);
    inputFirst_.set_data_handle(const_cast<float*>(input));  // read only
    inputLast_.set_data_handle(const_cast<float*>(in));
    std::unordered_map<int, memory> args{{DNNL_ARG_FROM, inputFirst_}, {DNNL_ARG_TO, inputLast_}};
    executeDnnl(toLast_, args, 0);
  }
  transformFilters(w, u);
  transformInputs(in, v);
  src_.set_data_handle(v);
  weights_.set_data_handle(u);
  dst_.set_data_handle(m);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_DST, dst_}};
  executeDnnlAt(matmul_, args, scratch + matmulScratchOffset_, matmulScratchBytes_);
  transformOutputs(
      m, bias, out,
      clamp.value_or(std::pair{-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()}));
  if (!channelsLast_) {
    outputLast_.set_data_handle(out);
    outputFirst_.set_data_handle(output);
    std::unordered_map<int, memory> back{{DNNL_ARG_FROM, outputLast_}, {DNNL_ARG_TO, outputFirst_}};
    executeDnnl(toFirst_, back, 0);
  }
}

// U[k] = G g G^T for every (input, output) channel pair of this convolution, laid out [36][C][O]; g is W's filter
// for the pair, flipped and transposed for the data gradient.
void ConvWinograd::transformFilters(const float* w, float* u) const {
  // W as stored: [Ofwd, Cfwd, 3, 3] (OIHW) or [Ofwd, 3, 3, Cfwd] (KRSC).
  const bool forward = role_ == Role::Forward;
  const std::int64_t cFwd = forward ? c_ : o_;
  const std::int64_t oStride = 9 * cFwd;
  const std::int64_t cStride = channelsLast_ ? 1 : 9;
  const std::int64_t tapStride = channelsLast_ ? cFwd : 1;  // between taps (i, j) and (i, j + 1)
  // The loop runs over this convolution's input channels and vectorises over its output channels, U's inner index.
  const std::int64_t outer = c_;
  const std::int64_t inner = o_;
  const std::int64_t planeStride = o_ * c_;
  parallelFor(0, outer, 1, [&](std::int64_t begin, std::int64_t end) {
    constexpr std::int64_t kBlock = 64;
    std::vector<float> buffer(static_cast<std::size_t>((9 + 18) * kBlock));
    float* taps = buffer.data();               // [9][block]: g for each pair of the block
    float* half = buffer.data() + 9 * kBlock;  // [6][3][block]: G g
    for (std::int64_t a = begin; a < end; ++a) {
      for (std::int64_t b0 = 0; b0 < inner; b0 += kBlock) {
        const std::int64_t len = std::min(kBlock, inner - b0);
        for (std::int64_t tap = 0; tap < 9; ++tap) {
          // This convolution's input channel a and output channel b0 + l are W's (c, o) forward and (o, c) for the
          // data gradient, whose filter is also flipped.
          const std::int64_t wTap = forward ? tap : 8 - tap;
          for (std::int64_t l = 0; l < len; ++l) {
            const std::int64_t oW = forward ? b0 + l : a;
            const std::int64_t cW = forward ? a : b0 + l;
            taps[tap * kBlock + l] = w[oW * oStride + cW * cStride + wTap * tapStride];
          }
        }
        // Columns first: half[r][j] = sum_i G[r][i] g[i][j].
        for (std::int64_t j = 0; j < 3; ++j) {
          const float* g[3] = {taps + j * kBlock, taps + (3 + j) * kBlock, taps + (6 + j) * kBlock};
          float* r[6];
          for (std::int64_t row = 0; row < 6; ++row)
            r[row] = half + (row * 3 + j) * kBlock;
          filterTransform(g, r, len);
        }
        // Then rows: U[r][s] = sum_j half[r][j] G[s][j], written to the 36 planes.
        for (std::int64_t row = 0; row < 6; ++row) {
          const float* g[3] = {half + row * 3 * kBlock, half + (row * 3 + 1) * kBlock, half + (row * 3 + 2) * kBlock};
          float* r[6];
          for (std::int64_t s = 0; s < 6; ++s)
            r[s] = u + (row * 6 + s) * planeStride + a * inner + b0;
          filterTransform(g, r, len);
        }
      }
    }
  });
}

ConvWinograd::TilePosition ConvWinograd::tileAt(std::int64_t tile) const {
  const std::int64_t perImage = tilesH_ * tilesW_;
  return {tile / perImage, tile % perImage / tilesW_, tile % tilesW_};
}

void ConvWinograd::transformInputs(const float* input, float* v) const {
  // Per tile, the 36 input pixels' channel vectors (zeros outside the image).
  parallelFor(0, tiles_, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> zeros(static_cast<std::size_t>(c_), 0.0f);
    std::vector<float> vertical(static_cast<std::size_t>(36 * c_));  // [6][6][C]
    for (std::int64_t tile = begin; tile < end; ++tile) {
      const auto [image, ty, tx] = tileAt(tile);
      for (std::int64_t j = 0; j < 6; ++j) {
        const float* d[6];
        float* r[6];
        for (std::int64_t k = 0; k < 6; ++k) {
          const std::int64_t y = kOut * ty - padTop_ + k, xc = kOut * tx - padLeft_ + j;
          d[k] = (y >= 0 && y < h_ && xc >= 0 && xc < w_) ? input + ((image * h_ + y) * w_ + xc) * c_ : zeros.data();
          r[k] = vertical.data() + (k * 6 + j) * c_;
        }
        inputTransform(d, r, c_);
      }
      for (std::int64_t i = 0; i < 6; ++i) {
        const float* d[6];
        float* r[6];
        for (std::int64_t j = 0; j < 6; ++j) {
          d[j] = vertical.data() + (i * 6 + j) * c_;
          r[j] = v + ((i * 6 + j) * tiles_ + tile) * c_;
        }
        inputTransform(d, r, c_);
      }
    }
  });
}

void ConvWinograd::transformOutputs(const float* m, const float* bias, float* output,
                                    std::pair<float, float> clamp) const {
  parallelFor(0, tiles_, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> buffer(static_cast<std::size_t>((24 + 4) * o_));
    float* horizontal = buffer.data();     // [6][4][O]
    float* pixels = horizontal + 24 * o_;  // [4][O]: one column of outputs
    for (std::int64_t tile = begin; tile < end; ++tile) {
      const auto [image, ty, tx] = tileAt(tile);
      for (std::int64_t i = 0; i < 6; ++i) {
        const float* points[6];
        float* r[4];
        for (std::int64_t j = 0; j < 6; ++j)
          points[j] = m + ((i * 6 + j) * tiles_ + tile) * o_;
        for (std::int64_t q = 0; q < 4; ++q)
          r[q] = horizontal + (i * 4 + q) * o_;
        outputTransform(points, r, o_);
      }
      for (std::int64_t q = 0; q < 4 && kOut * tx + q < ow_; ++q) {
        const float* points[6];
        float* r[4];
        for (std::int64_t i = 0; i < 6; ++i)
          points[i] = horizontal + (i * 4 + q) * o_;
        for (std::int64_t row = 0; row < 4; ++row)
          r[row] = pixels + row * o_;
        outputTransform(points, r, o_);
        for (std::int64_t row = 0; row < 4 && kOut * ty + row < oh_; ++row) {
          float* y = output + ((image * oh_ + kOut * ty + row) * ow_ + kOut * tx + q) * o_;
          const float* value = pixels + row * o_;
          const auto [lo, hi] = clamp;  // (-inf, +inf) when nothing is fused: every value as it is, NaN included
          if (bias != nullptr) {
#pragma omp simd
            for (std::int64_t k = 0; k < o_; ++k)
              y[k] = std::min(std::max(value[k] + bias[k], lo), hi);
          } else {
#pragma omp simd
            for (std::int64_t k = 0; k < o_; ++k)
              y[k] = std::min(std::max(value[k], lo), hi);
          }
        }
      }
    }
  });
}

}  // namespace strata::cpu
