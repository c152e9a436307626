#include "conv_gemm.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include <fmt/format.h>

#include "dnnl_layout_detour.h"
#include "strata/thread_pool.h"

namespace strata::cpu {
namespace {

using dnnl::memory;

// A [rows, cols] float32 matrix descriptor; `transposed`: stored as [cols, rows] row-major.
memory::desc matrixDesc(std::int64_t rows, std::int64_t cols, bool transposed = false) {
  return memory::desc({rows, cols}, memory::data_type::f32, transposed ? memory::dims{1, rows} : memory::dims{cols, 1});
}

dnnl::matmul::primitive_desc matmulPd(const memory::desc& src, const memory::desc& weights, const memory::desc& dst,
                                      const memory::desc* bias = nullptr) {
  const dnnl::matmul::desc desc =
      bias != nullptr ? dnnl::matmul::desc(src, weights, *bias, dst) : dnnl::matmul::desc(src, weights, dst);
  return dnnl::matmul::primitive_desc(desc, userScratchpadAttr(), dnnlEngine());
}

void run(dnnl::matmul& primitive, std::unordered_map<int, memory> args, char* scratch, std::size_t scratchBytes) {
  executeDnnlAt(primitive, args, scratch, scratchBytes);
}

}  // namespace

std::unique_ptr<ConvGemm> ConvGemm::plan(const Shape& x, const Shape& w, std::int64_t group, const WindowGeometry& g,
                                         bool bias, bool channelsLast) {
  if (group != 1 || x.size() < 3)
    return nullptr;
  const std::size_t dims = g.kernel.size();
  bool wholeInput = true, singleTap = true;
  std::int64_t pixel = 0, stride = 1, plane = 1;
  for (std::size_t d = dims; d-- > 0;) {
    const std::int64_t in = x[2 + d];
    if (g.output[d] != 1)
      return nullptr;  // one output pixel only
    wholeInput = wholeInput && g.padBegin[d] == 0 && g.kernel[d] == in && (in == 1 || g.dilations[d] == 1);
    const std::int64_t position = -g.padBegin[d];  // the single tap's input position
    singleTap = singleTap && g.kernel[d] == 1 && position >= 0 && position < in;
    pixel += std::max<std::int64_t>(position, 0) * stride;
    stride *= in;
    plane *= in;
  }
  if (!wholeInput && !singleTap)
    return nullptr;
  std::unique_ptr<ConvGemm> gemm(new ConvGemm());
  gemm->n_ = x[0];
  gemm->o_ = w[0];
  gemm->bias_ = bias;
  if (wholeInput) {
    gemm->k_ = x[1] * plane;  // X is A: [N, C x pixels], W [O, C x taps] with the same order
  } else {
    gemm->k_ = x[1];
    if (plane > 1) {  // A is one pixel of each image's channels: gathered
      gemm->imageSize_ = x[1] * plane;
      gemm->pixel_ = channelsLast ? pixel * x[1] : pixel;
      gemm->channelStride_ = channelsLast ? 1 : plane;
      gemm->rowsBytes_ = alignUp(static_cast<std::size_t>(gemm->n_ * gemm->k_) * sizeof(float));
    }
  }
  const std::int64_t n = gemm->n_, k = gemm->k_, o = gemm->o_;
  try {
    const memory::desc biasDesc({1, o}, memory::data_type::f32, memory::dims{o, 1});
    const auto forwardPd =
        matmulPd(matrixDesc(n, k), matrixDesc(k, o, true), matrixDesc(n, o), bias ? &biasDesc : nullptr);
    const auto dataPd = matmulPd(matrixDesc(n, o), matrixDesc(o, k), matrixDesc(n, k));
    const auto weightsPd = matmulPd(matrixDesc(o, n, true), matrixDesc(n, k), matrixDesc(o, k));
    gemm->forward_ = dnnl::matmul(forwardPd);
    gemm->data_ = dnnl::matmul(dataPd);
    gemm->weights_ = dnnl::matmul(weightsPd);
    gemm->implementation_ = forwardPd.impl_info_str();
    gemm->ownScratch_ = std::max({forwardPd.scratchpad_desc().get_size(), dataPd.scratchpad_desc().get_size(),
                                  weightsPd.scratchpad_desc().get_size()});
    gemm->fwdSrc_ = memory(forwardPd.src_desc(), dnnlEngine(), nullptr);
    gemm->fwdWeights_ = memory(forwardPd.weights_desc(), dnnlEngine(), nullptr);
    gemm->fwdDst_ = memory(forwardPd.dst_desc(), dnnlEngine(), nullptr);
    if (bias)
      gemm->fwdBias_ = memory(biasDesc, dnnlEngine(), nullptr);
    gemm->dataSrc_ = memory(dataPd.src_desc(), dnnlEngine(), nullptr);
    gemm->dataWeights_ = memory(dataPd.weights_desc(), dnnlEngine(), nullptr);
    gemm->dataDst_ = memory(dataPd.dst_desc(), dnnlEngine(), nullptr);
    gemm->wSrc_ = memory(weightsPd.src_desc(), dnnlEngine(), nullptr);
    gemm->wWeights_ = memory(weightsPd.weights_desc(), dnnlEngine(), nullptr);
    gemm->wDst_ = memory(weightsPd.dst_desc(), dnnlEngine(), nullptr);
  } catch (const dnnl::error&) {
    return nullptr;  // oneDNN has no matmul for it: the convolution primitive runs
  }
  // Scratchpad: [gathered A | dA (single tap) | the matmuls' own scratchpad].
  gemm->scratchBytes_ = 2 * gemm->rowsBytes_ + gemm->ownScratch_;
  return gemm;
}

std::string ConvGemm::implementation() const {
  return fmt::format("one GEMM over the batch (oneDNN {})", implementation_);
}

const float* ConvGemm::sourceRows(const float* x, char* scratch) const {
  if (imageSize_ == 0)
    return x;
  auto* rows = reinterpret_cast<float*>(scratch);
  parallelFor(0, n_, std::max<std::int64_t>(1, 4096 / k_), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t n = begin; n < end; ++n) {
      const float* image = x + n * imageSize_ + pixel_;
      for (std::int64_t c = 0; c < k_; ++c)
        rows[n * k_ + c] = image[c * channelStride_];
    }
  });
  return rows;
}

void ConvGemm::forward(const float* x, const float* w, const float* bias, float* y, char* scratch) {
  fwdSrc_.set_data_handle(const_cast<float*>(sourceRows(x, scratch)));  // oneDNN only reads inputs
  fwdWeights_.set_data_handle(const_cast<float*>(w));
  fwdDst_.set_data_handle(y);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, fwdSrc_}, {DNNL_ARG_WEIGHTS, fwdWeights_}, {DNNL_ARG_DST, fwdDst_}};
  if (bias_) {
    fwdBias_.set_data_handle(const_cast<float*>(bias));
    args[DNNL_ARG_BIAS] = fwdBias_;
  }
  run(forward_, std::move(args), scratch + 2 * rowsBytes_, ownScratch_);
}

void ConvGemm::backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db,
                        char* scratch) {
  char* own = scratch + 2 * rowsBytes_;
  if (dw != nullptr) {
    wSrc_.set_data_handle(const_cast<float*>(dy));
    wWeights_.set_data_handle(const_cast<float*>(sourceRows(x, scratch)));
    wDst_.set_data_handle(dw);
    run(weights_, {{DNNL_ARG_SRC, wSrc_}, {DNNL_ARG_WEIGHTS, wWeights_}, {DNNL_ARG_DST, wDst_}}, own, ownScratch_);
  }
  if (db != nullptr) {
    parallelFor(0, o_, 64, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t j = begin; j < end; ++j) {
        double sum = 0;
        for (std::int64_t i = 0; i < n_; ++i)
          sum += dy[i * o_ + j];
        db[j] = static_cast<float>(sum);
      }
    });
  }
  if (dx != nullptr) {
    // A single tap's dA goes to one pixel of each image's channels in dX, zeros elsewhere.
    float* rows = imageSize_ == 0 ? dx : reinterpret_cast<float*>(scratch + rowsBytes_);
    dataSrc_.set_data_handle(const_cast<float*>(dy));
    dataWeights_.set_data_handle(const_cast<float*>(w));
    dataDst_.set_data_handle(rows);
    run(data_, {{DNNL_ARG_SRC, dataSrc_}, {DNNL_ARG_WEIGHTS, dataWeights_}, {DNNL_ARG_DST, dataDst_}}, own,
        ownScratch_);
    if (imageSize_ != 0) {
      parallelFor(0, n_, std::max<std::int64_t>(1, 4096 / imageSize_), [&](std::int64_t begin, std::int64_t end) {
        std::fill(dx + begin * imageSize_, dx + end * imageSize_, 0.0f);
        for (std::int64_t n = begin; n < end; ++n) {
          float* image = dx + n * imageSize_ + pixel_;
          for (std::int64_t c = 0; c < k_; ++c)
            image[c * channelStride_] = rows[n * k_ + c];
        }
      });
    }
  }
}

}  // namespace strata::cpu
