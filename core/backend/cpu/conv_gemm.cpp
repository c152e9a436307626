#include "conv_gemm.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include <fmt/format.h>

#include "cpu_layouts.h"
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

void run(dnnl::primitive& primitive, std::unordered_map<int, memory> args, char* scratch, std::size_t scratchBytes) {
  executeDnnlAt(primitive, args, scratch, scratchBytes);
}

memory::dims toDims(const std::vector<std::int64_t>& v) {
  return memory::dims(v.begin(), v.end());
}

// Whether two plain (strided) descriptors address the same bytes: equal dims and equal strides wherever a dim has
// more than one element (the strides of unit dims do not matter).
bool sameBytes(const memory::desc& a, const memory::desc& b) {
  const dnnl_memory_desc_t &x = a.data, &y = b.data;
  if (x.ndims != y.ndims || x.format_kind != dnnl_blocked || y.format_kind != dnnl_blocked ||
      x.format_desc.blocking.inner_nblks != 0 || y.format_desc.blocking.inner_nblks != 0)
    return a == b;
  for (int d = 0; d < x.ndims; ++d) {
    if (x.dims[d] != y.dims[d])
      return false;
    if (x.dims[d] > 1 && x.format_desc.blocking.strides[d] != y.format_desc.blocking.strides[d])
      return false;
  }
  return true;
}

}  // namespace

std::size_t ConvGemm::planRows(Rows& rows, const memory::desc& view, const memory::desc& matrix) {
  rows.tensor = memory(view, dnnlEngine(), nullptr);
  rows.matrix = memory(matrix, dnnlEngine(), nullptr);
  rows.direct = sameBytes(view, matrix);
  if (rows.direct)
    return 0;
  const dnnl::reorder::primitive_desc in(dnnlEngine(), view, dnnlEngine(), matrix, userScratchpadAttr());
  const dnnl::reorder::primitive_desc out(dnnlEngine(), matrix, dnnlEngine(), view, userScratchpadAttr());
  rows.gather = dnnl::reorder(in);
  rows.scatter = dnnl::reorder(out);
  return std::max(in.scratchpad_desc().get_size(), out.scratchpad_desc().get_size());
}

std::unique_ptr<ConvGemm> ConvGemm::plan(const Shape& x, const Shape& w, std::int64_t group, const WindowGeometry& g,
                                         bool bias, bool channelsLast) {
  if (group != 1 || x.size() < 3)
    return nullptr;
  const std::size_t dims = g.kernel.size();
  const std::vector<std::int64_t> in(x.begin() + 2, x.end());
  bool wholeInput = true, pointwise = true;
  std::int64_t pixels = 1;
  for (std::size_t d = 0; d < dims; ++d) {
    wholeInput = wholeInput && g.output[d] == 1 && g.padBegin[d] == 0 && g.kernel[d] == in[d] &&
                 (in[d] == 1 || g.dilations[d] == 1);
    // A single tap reads positions o * stride, all inside the input.
    pointwise = pointwise && g.kernel[d] == 1 && g.padBegin[d] == 0 && (g.output[d] - 1) * g.strides[d] < in[d];
    pixels *= g.output[d];
  }
  if (!wholeInput && !(pointwise && pixels <= kMaxGemmPixels))
    return nullptr;
  std::unique_ptr<ConvGemm> gemm(new ConvGemm());
  const std::int64_t batch = x[0], channels = x[1];
  gemm->o_ = w[0];
  gemm->bias_ = bias;
  std::size_t reorderScratch = 0;
  try {
    Shape xView = x, yShape = {batch, w[0]};
    std::vector<std::int64_t> viewStrides;
    if (wholeInput) {  // X is A, [N, C x pixels]; Y is [N, O] in either layout
      gemm->rows_ = batch;
      gemm->k_ = numElements(x) / std::max<std::int64_t>(batch, 1);
      yShape.insert(yShape.end(), dims, 1);
    } else {  // A is the [N x pixels, C] matrix of the pixels the tap reads
      gemm->rows_ = batch * pixels;
      gemm->k_ = channels;
      const std::vector<std::int64_t> xStrides = stridesWithInnermost(x, channelsLast ? 1 : -1);
      viewStrides = {xStrides[0], xStrides[1]};
      for (std::size_t d = 0; d < dims; ++d) {
        xView[2 + d] = g.output[d];
        viewStrides.push_back(xStrides[2 + d] * g.strides[d]);
      }
      yShape.insert(yShape.end(), g.output.begin(), g.output.end());
      gemm->zeroDx_ = numElements(xView) < numElements(x);
      gemm->xElements_ = numElements(x);
      const memory::desc view(toDims(xView), memory::data_type::f32, toDims(viewStrides));
      reorderScratch = std::max(reorderScratch, planRows(gemm->a_, view, descWithInnermost(xView, 1)));
    }
    reorderScratch = std::max(reorderScratch,
                              planRows(gemm->y_, activationDesc(yShape, channelsLast), descWithInnermost(yShape, 1)));
    if (wholeInput)
      gemm->a_.direct = true;  // X's own bytes, whatever its layout: the weights share the order
    const std::int64_t rows = gemm->rows_, k = gemm->k_, o = gemm->o_;
    const memory::desc biasDesc({1, o}, memory::data_type::f32, memory::dims{o, 1});
    const auto forwardPd =
        matmulPd(matrixDesc(rows, k), matrixDesc(k, o, true), matrixDesc(rows, o), bias ? &biasDesc : nullptr);
    const auto dataPd = matmulPd(matrixDesc(rows, o), matrixDesc(o, k), matrixDesc(rows, k));
    const auto weightsPd = matmulPd(matrixDesc(o, rows, true), matrixDesc(rows, k), matrixDesc(o, k));
    gemm->forward_ = dnnl::matmul(forwardPd);
    gemm->data_ = dnnl::matmul(dataPd);
    gemm->weights_ = dnnl::matmul(weightsPd);
    gemm->implementation_ = forwardPd.impl_info_str();
    gemm->ownBytes_ = std::max({forwardPd.scratchpad_desc().get_size(), dataPd.scratchpad_desc().get_size(),
                                weightsPd.scratchpad_desc().get_size(), reorderScratch});
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
    return nullptr;  // oneDNN has no matmul or reorder for it: the convolution primitive runs
  }
  // Scratchpad: [A's copy | dA's copy | Y's (or dY's) copy | the matmuls' and reorders' own scratchpad].
  const auto bytes = [](std::int64_t elements) { return alignUp(static_cast<std::size_t>(elements) * sizeof(float)); };
  std::size_t offset = 0;
  if (!gemm->a_.direct) {
    gemm->a_.offset = offset;
    gemm->daOffset_ = offset + bytes(gemm->rows_ * gemm->k_);
    offset = gemm->daOffset_ + bytes(gemm->rows_ * gemm->k_);
  }
  if (!gemm->y_.direct) {
    gemm->y_.offset = offset;
    offset += bytes(gemm->rows_ * gemm->o_);
  }
  gemm->ownOffset_ = offset;
  gemm->scratchBytes_ = offset + gemm->ownBytes_;
  return gemm;
}

std::string ConvGemm::implementation() const {
  return fmt::format("one GEMM over the batch (oneDNN {})", implementation_);
}

const float* ConvGemm::matrixOf(Rows& rows, const float* data, char* scratch, bool copyIn) {
  if (rows.direct)
    return data;
  auto* matrix = reinterpret_cast<float*>(scratch + rows.offset);
  if (copyIn) {
    rows.tensor.set_data_handle(const_cast<float*>(data));  // oneDNN only reads it
    rows.matrix.set_data_handle(matrix);
    run(rows.gather, {{DNNL_ARG_FROM, rows.tensor}, {DNNL_ARG_TO, rows.matrix}}, own(scratch), ownBytes_);
  }
  return matrix;
}

void ConvGemm::forward(const float* x, const float* w, const float* bias, float* y, char* scratch) {
  fwdSrc_.set_data_handle(const_cast<float*>(matrixOf(a_, x, scratch, true)));  // oneDNN only reads inputs
  fwdWeights_.set_data_handle(const_cast<float*>(w));
  auto* result = const_cast<float*>(matrixOf(y_, y, scratch, false));
  fwdDst_.set_data_handle(result);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, fwdSrc_}, {DNNL_ARG_WEIGHTS, fwdWeights_}, {DNNL_ARG_DST, fwdDst_}};
  if (bias_) {
    fwdBias_.set_data_handle(const_cast<float*>(bias));
    args[DNNL_ARG_BIAS] = fwdBias_;
  }
  run(forward_, std::move(args), own(scratch), ownBytes_);
  if (!y_.direct) {
    y_.tensor.set_data_handle(y);
    y_.matrix.set_data_handle(result);
    run(y_.scatter, {{DNNL_ARG_FROM, y_.matrix}, {DNNL_ARG_TO, y_.tensor}}, own(scratch), ownBytes_);
  }
}

void ConvGemm::backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db,
                        char* scratch) {
  const float* dyRows = matrixOf(y_, dy, scratch, true);
  if (dw != nullptr) {
    wSrc_.set_data_handle(const_cast<float*>(dyRows));
    wWeights_.set_data_handle(const_cast<float*>(matrixOf(a_, x, scratch, true)));
    wDst_.set_data_handle(dw);
    run(weights_, {{DNNL_ARG_SRC, wSrc_}, {DNNL_ARG_WEIGHTS, wWeights_}, {DNNL_ARG_DST, wDst_}}, own(scratch),
        ownBytes_);
  }
  if (db != nullptr) {
    parallelFor(0, o_, 64, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t j = begin; j < end; ++j) {
        double sum = 0;
        for (std::int64_t i = 0; i < rows_; ++i)
          sum += dyRows[i * o_ + j];
        db[j] = static_cast<float>(sum);
      }
    });
  }
  if (dx != nullptr) {
    float* daRows = a_.direct ? dx : reinterpret_cast<float*>(scratch + daOffset_);
    dataSrc_.set_data_handle(const_cast<float*>(dyRows));
    dataWeights_.set_data_handle(const_cast<float*>(w));
    dataDst_.set_data_handle(daRows);
    run(data_, {{DNNL_ARG_SRC, dataSrc_}, {DNNL_ARG_WEIGHTS, dataWeights_}, {DNNL_ARG_DST, dataDst_}}, own(scratch),
        ownBytes_);
    if (!a_.direct) {
      if (zeroDx_) {  // the pixels no tap reads get no gradient
        parallelFor(0, xElements_, 1 << 16,
                    [&](std::int64_t begin, std::int64_t end) { std::fill(dx + begin, dx + end, 0.0f); });
      }
      a_.tensor.set_data_handle(dx);
      a_.matrix.set_data_handle(daRows);
      run(a_.scatter, {{DNNL_ARG_FROM, a_.matrix}, {DNNL_ARG_TO, a_.tensor}}, own(scratch), ownBytes_);
    }
  }
}

}  // namespace strata::cpu
