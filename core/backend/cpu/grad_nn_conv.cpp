// Conv gradients: ConvGradInput (dY, W -> dX), ConvGradWeight (dY, X -> dW [, dB]) and the fused ConvGrad
// (dY, X, W -> dX, dW [, dB]). Float32 runs oneDNN's convolution_backward_data / convolution_backward_weights (or
// Strata's loops where oneDNN has only a poor GEMM: Notes [Batched weight gradient], [Depthwise weight gradient],
// [Small-group weight gradient], [Small-group convolutions]),
// float64 im2col GEMMs (conv_f64_grad.cpp).

#include <cstring>
#include <memory>
#include <optional>

#include "conv_batch_columns.h"
#include "conv_depthwise_grad.h"
#include "conv_f64.h"
#include "conv_gemm.h"
#include "conv_geometry.h"
#include "conv_small_groups.h"
#include "conv_taps.h"
#include "conv_whole_map.h"
#include "conv_winograd.h"
#include "cpu_layouts.h"
#include "dnnl_layout_detour.h"
#include "grad_nn_common.h"
#include "strata/thread_pool.h"

namespace strata::cpu::grad_nn {
namespace {

using dnnl::memory;

memory::dims toDims(const std::vector<std::int64_t>& v) {
  return memory::dims(v.begin(), v.end());
}

struct ConvGradSetup {
  DType dtype = DType::Float32;
  std::int64_t group = 1;
  WindowGeometry geometry;
  Shape x, w, y;
};

// Checks the forward Conv's geometry (as dnnl_conv.cpp resolves it) against dY's shape.
ConvGradSetup resolveConvGrad(const Attributes& attrs, DType dtype, const Shape& x, const Shape& w, const Shape& dy) {
  if (dtype != DType::Float32 && dtype != DType::Float64) {
    fail("only float32 and float64 are supported, got {}", dtypeName(dtype));
  }
  if (x.size() < 3 || x.size() > 5)
    fail("X must have rank 3 to 5, got {}", shapeToString(x));
  if (w.size() != x.size())
    fail("W {} must have the same rank as X {}", shapeToString(w), shapeToString(x));
  ConvGradSetup s;
  s.dtype = dtype;
  s.x = x;
  s.w = w;
  s.group = attrs.getInt("group", 1);
  if (s.group < 1)
    fail("group must be positive, got {}", s.group);
  if (x[1] != w[1] * s.group) {
    fail("X has {} input channels but W {} with group {} expects {}", x[1], shapeToString(w), s.group, w[1] * s.group);
  }
  if (w[0] % s.group != 0)
    fail("W has {} output channels, not divisible by group {}", w[0], s.group);
  const std::vector<std::int64_t> kernel = kernelShapeOf(attrs, w);
  s.geometry = resolveWindow(attrs, std::vector<std::int64_t>(x.begin() + 2, x.end()), kernel, false);
  s.y = {x[0], w[0]};
  s.y.insert(s.y.end(), s.geometry.output.begin(), s.geometry.output.end());
  if (dy != s.y)
    fail("dY has shape {} but the Conv output is {}", shapeToString(dy), shapeToString(s.y));
  return s;
}

Shape shapeAttr(const ShapeContext& ctx, const char* name) {
  if (!ctx.attrs.has(name))
    ctx.error(fmt::format("the {} attribute is required", name));
  return ctx.attrs.getInts(name);
}

std::vector<TensorMeta> inferConvGrad(ConvGradMode mode, const ShapeContext& ctx) {
  const std::size_t needed = mode == ConvGradMode::Both ? 3 : 2;
  for (std::size_t i = 0; i < needed; ++i) {
    if (!ctx.hasInput(i))
      ctx.error(fmt::format("{} needs {} inputs", ctx.opType, needed));
  }
  const TensorMeta& dy = ctx.input(0).meta;
  for (std::size_t i = 1; i < needed; ++i) {
    if (ctx.input(i).meta.dtype != dy.dtype) {
      ctx.error(fmt::format("input {} is {} but dY is {}", i, dtypeName(ctx.input(i).meta.dtype), dtypeName(dy.dtype)));
    }
  }
  Shape x, w;
  switch (mode) {
    case ConvGradMode::Input:
      x = shapeAttr(ctx, "input_shape");
      w = ctx.input(1).meta.shape;
      break;
    case ConvGradMode::Weight:
      x = ctx.input(1).meta.shape;
      w = shapeAttr(ctx, "weight_shape");
      break;
    case ConvGradMode::Both:
      x = ctx.input(1).meta.shape;
      w = ctx.input(2).meta.shape;
      break;
  }
  try {
    resolveConvGrad(ctx.attrs, dy.dtype, x, w, dy.shape);
  } catch (const Error& e) {
    ctx.error(e.what());
  }
  std::vector<TensorMeta> out;
  if (mode != ConvGradMode::Weight)
    out.push_back({dy.dtype, x});
  if (mode != ConvGradMode::Input) {
    out.push_back({dy.dtype, w});
    if (ctx.outputCount > out.size())
      out.push_back({dy.dtype, {w[0]}});  // dB
  }
  if (ctx.outputCount > out.size())
    ctx.error(fmt::format("{} has at most {} outputs", ctx.opType, out.size()));
  return out;
}

// ---- float32: oneDNN ----

// Layouts as in the forward kernel (Note [Conv layouts] in dnnl_conv.cpp): oneDNN picks them, with reorders
// around the primitives.

// ONNX's (O, I/G, k...) weights as oneDNN's grouped (G, O/G, I/G, k...) when group > 1: the same bytes.
Shape groupedWeightDims(const Shape& w, std::int64_t group) {
  if (group == 1)
    return w;
  Shape dims{group, w[0] / group};
  dims.insert(dims.end(), w.begin() + 1, w.end());
  return dims;
}

// Note [Batched weight gradient]: for some shapes oneDNN computes a convolution's weight gradient with im2col + GEMM
// ("x64:gemm:jit"): on AVX2 every 3x3 convolution of ResNet-18's last two stages at 32x32 (2x2 and 1x1 maps). It
// runs one GEMM per image whose inner dimension is that image's few output pixels, so 7 of ResNet-18's 20
// convolutions took half of its training step (51 of 104 ms, batch 32, 2 threads). The kernel then does the same
// product as one GEMM over the whole batch instead: dW (O x C*k*k) = dY^T (O x N*P) * columns (N*P x C*k*k), with P
// output pixels per image, both operands copied into the scratchpad. Only for 2-D convolutions and when the copies
// stay small (kMaxBatchedBytes). Grouped convolutions with several channels per group get the same when their maps
// are small (at most ConvGemm::kMaxGemmPixels output pixels): oneDNN's GEMM per image and group had an inner
// dimension of four pixels on RegNetY-400MF's last stage at 64x64 (0.7 ms per node, 5 nodes, 8% of its step); one
// GEMM per group over the batch, dW_g = dY_g^T columns_g, reads the same two copies. Channels-last nodes (Note [CPU
// channels-last]) read dY [N x P, O] as it lies (the GEMM takes it transposed) and copy each window's taps as runs
// of C / G values, so that the columns of group g, (tap, channel of g), are dW's KRSC rows: ResNeXt-50's layer3 under
// the AVX2 cap would otherwise run oneDNN's GEMM per image and group.
struct BatchedWeightGradient {
  static constexpr std::size_t kMaxBatchedBytes = std::size_t{64} << 20;
  std::int64_t images = 0, channels = 0, outChannels = 0, pixels = 0, columns = 0, groups = 1;
  bool channelsLast = false;
  std::size_t dyOffset = 0, columnOffset = 0;

  std::size_t dyBytes() const {
    return channelsLast ? 0 : static_cast<std::size_t>(outChannels * images * pixels) * sizeof(float);
  }
  std::size_t columnBytes() const { return static_cast<std::size_t>(images * pixels * columns) * sizeof(float); }

  // dW (and dB when `db` is set) from dY and X in Strata's layouts.
  void run(const ConvGradSetup& s, const float* dy, const float* x, float* dw, float* db, char* scratch) const {
    if (channelsLast) {
      runChannelsLast(s, dy, x, dw, db, scratch);
      return;
    }
    const WindowGeometry& g = s.geometry;
    const std::int64_t inH = s.x[2], inW = s.x[3], outW = s.y[3];
    const std::int64_t kh = g.kernel[0], kw = g.kernel[1];
    auto* dyT = reinterpret_cast<float*>(scratch + dyOffset);
    auto* col = reinterpret_cast<float*>(scratch + columnOffset);
    const std::int64_t rows = images * pixels;
    parallelFor(0, outChannels, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t o = begin; o < end; ++o) {
        for (std::int64_t n = 0; n < images; ++n)
          std::memcpy(dyT + o * rows + n * pixels, dy + (n * outChannels + o) * pixels, sizeof(float) * pixels);
      }
    });
    parallelFor(0, rows, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t row = begin; row < end; ++row) {
        const std::int64_t n = row / pixels, oh = row % pixels / outW, ow = row % outW;
        float* out = col + row * columns;
        for (std::int64_t c = 0; c < channels; ++c) {
          const float* plane = x + (n * channels + c) * inH * inW;
          for (std::int64_t i = 0; i < kh; ++i) {
            const std::int64_t ih = oh * g.strides[0] - g.padBegin[0] + i * g.dilations[0];
            for (std::int64_t j = 0; j < kw; ++j) {
              const std::int64_t iw = ow * g.strides[1] - g.padBegin[1] + j * g.dilations[1];
              *out++ = ih >= 0 && ih < inH && iw >= 0 && iw < inW ? plane[ih * inW + iw] : 0.0f;
            }
          }
        }
      }
    });
    // Group g: its output channels' rows of dY^T, its input channels' columns, its block of dW ([O/G, C/G x k x k]).
    const std::int64_t groupOut = outChannels / groups, groupColumns = columns / groups;
    for (std::int64_t group = 0; group < groups; ++group) {
      const dnnl_status_t status =
          dnnl_sgemm('N', 'N', groupOut, groupColumns, rows, 1.0f, dyT + group * groupOut * rows, rows,
                     col + group * groupColumns, columns, 0.0f, dw + group * groupOut * groupColumns, groupColumns);
      if (status != dnnl_success)
        fail("the batched weight-gradient GEMM failed (oneDNN status {})", static_cast<int>(status));
    }
    if (db != nullptr) {
      for (std::int64_t o = 0; o < outChannels; ++o) {
        double sum = 0;
        for (std::int64_t r = 0; r < rows; ++r)
          sum += dyT[o * rows + r];
        db[o] = static_cast<float>(sum);
      }
    }
  }

  // X [N, H, W, C], dY [N x P, O], dW [O, kh, kw, C / G].
  void runChannelsLast(const ConvGradSetup& s, const float* dy, const float* x, float* dw, float* db,
                       char* scratch) const {
    const WindowGeometry& g = s.geometry;
    const std::int64_t inH = s.x[2], inW = s.x[3], outW = s.y[3];
    const std::int64_t kh = g.kernel[0], kw = g.kernel[1];
    const std::int64_t groupChannels = channels / groups, taps = kh * kw;
    auto* col = reinterpret_cast<float*>(scratch + columnOffset);
    const std::int64_t rows = images * pixels;
    parallelFor(0, rows, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t row = begin; row < end; ++row) {
        const std::int64_t n = row / pixels, oh = row % pixels / outW, ow = row % outW;
        float* out = col + row * columns;
        for (std::int64_t i = 0; i < kh; ++i) {
          const std::int64_t ih = oh * g.strides[0] - g.padBegin[0] + i * g.dilations[0];
          for (std::int64_t j = 0; j < kw; ++j) {
            const std::int64_t iw = ow * g.strides[1] - g.padBegin[1] + j * g.dilations[1];
            const bool inside = ih >= 0 && ih < inH && iw >= 0 && iw < inW;
            const float* pixel = x + ((n * inH + ih) * inW + iw) * channels;
            for (std::int64_t group = 0; group < groups; ++group) {
              float* run = out + (group * taps + i * kw + j) * groupChannels;
              if (inside)
                std::memcpy(run, pixel + group * groupChannels, sizeof(float) * groupChannels);
              else
                std::fill_n(run, groupChannels, 0.0f);
            }
          }
        }
      }
    });
    const std::int64_t groupOut = outChannels / groups, groupColumns = columns / groups;
    for (std::int64_t group = 0; group < groups; ++group) {
      const dnnl_status_t status =
          dnnl_sgemm('T', 'N', groupOut, groupColumns, rows, 1.0f, dy + group * groupOut, outChannels,
                     col + group * groupColumns, columns, 0.0f, dw + group * groupOut * groupColumns, groupColumns);
      if (status != dnnl_success)
        fail("the batched weight-gradient GEMM failed (oneDNN status {})", static_cast<int>(status));
    }
    if (db != nullptr) {
      std::vector<double> sums(static_cast<std::size_t>(outChannels), 0.0);
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t o = 0; o < outChannels; ++o)
          sums[static_cast<std::size_t>(o)] += dy[r * outChannels + o];
      }
      for (std::int64_t o = 0; o < outChannels; ++o)
        db[o] = static_cast<float>(sums[static_cast<std::size_t>(o)]);
    }
  }
};

class ConvGradKernel : public OpKernel {
 public:
  ConvGradKernel(ConvGradMode mode, const KernelInit& init) {
    // Note [CPU channels-last]: everything below works on logical [N, C, spatial...] dims.
    channelsLast_ = channelsLastOf(init.attrs);
    const TensorMeta& dy = init.inputs.at(0).meta;
    io_ = convGradOperands(mode, init);
    setup_ = resolveConvGrad(init.attrs, dy.dtype, logicalShape(io_.x, channelsLast_),
                             logicalShape(io_.w, channelsLast_), logicalShape(dy.shape, channelsLast_));
    empty_ = numElements(setup_.x) == 0 || numElements(setup_.w) == 0 || numElements(setup_.y) == 0;
    if (empty_ || setup_.dtype == DType::Float64)
      return;
    // Note [Pruned taps]: the primitives see the used taps only; W is gathered into and dW scattered from dense
    // cropped copies in the scratchpad.
    const std::vector<std::int64_t> spatial(setup_.x.begin() + 2, setup_.x.end());
    taps_ = usedTaps(setup_.geometry, spatial);
    fullW_ = setup_.w;
    if (taps_.pruned) {
      setup_.geometry = croppedWindow(setup_.geometry, spatial, taps_);
      setup_.w = croppedWeightShape(setup_.w, taps_);
    }
    // Note [Convolutions as one GEMM]: one output pixel per image.
    gemm_ = withDnnlErrors(init.nodeName, "plan the convolution backward as a GEMM", [&] {
      return ConvGemm::plan(setup_.x, setup_.w, setup_.group, setup_.geometry, false, channelsLast_);
    });
    if (gemm_ != nullptr) {
      planCroppedCopies(alignUp(gemm_->scratchBytes()));
      return;
    }
    // Note [Whole-map convolutions], Note [Small maps as batch columns]: one GEMM over reshaped operands.
    if (!taps_.pruned) {
      reshaped_ = withDnnlErrors(init.nodeName, "plan the convolution backward as a reshaped GEMM", [&] {
        return planReshapedGemmConv(setup_.x, setup_.w, setup_.group, setup_.geometry, false, channelsLast_);
      });
      if (reshaped_ != nullptr) {
        totalScratchBytes_ = reshaped_->backwardScratchBytes();
        return;
      }
    }
    // Note [Winograd convolutions]: the data pass of a 3x3 stride-1 convolution with enough channels and pixels.
    if (io_.dxOut >= 0 && !taps_.pruned) {
      winogradData_ = withDnnlErrors(init.nodeName, "plan the Winograd data gradient", [&] {
        return ConvWinograd::plan(ConvWinograd::Role::DataGradient, setup_.x, setup_.w, setup_.group, setup_.geometry,
                                  channelsLast_);
      });
    }
    withDnnlErrors(init.nodeName, "create the convolution backward primitives", [&] { createPrimitives(); });
  }

  std::string implementation() const override {
    if (setup_.dtype == DType::Float64)
      return "float64 im2col GEMM";
    if (gemm_ != nullptr)
      return gemm_->implementation() + tapNote(fullW_, taps_);
    if (reshaped_ != nullptr)
      return reshaped_->implementation();
    std::string out;
    if (!weightsImplementation_.empty())
      out = "weights: " + (ownWeightsLoop() ? weightsImplementation_
                                            : "oneDNN " + weightsImplementation_ +
                                                  perGroupGemmNote(weightsImplementation_, setup_.group));
    if (winogradData_ != nullptr)
      out += (out.empty() ? "" : "; ") + std::string("data: ") + winogradData_->implementation();
    else if (smallGroupData_)
      out += (out.empty() ? "" : "; ") + std::string("data: ") + smallGroupData_->implementation();
    else if (!dataImplementation_.empty())
      out += (out.empty() ? "" : "; ") + std::string("data: oneDNN ") + dataImplementation_ +
             perGroupGemmNote(dataImplementation_, setup_.group);
    return out + tapNote(fullW_, taps_);
  }

  void compute(KernelContext& ctx) override {
    const bool wantData = io_.dxOut >= 0 && ctx.hasOutput(static_cast<std::size_t>(io_.dxOut));
    const bool wantWeights = io_.dwOut >= 0 && ctx.hasOutput(static_cast<std::size_t>(io_.dwOut));
    const bool wantBias = io_.dbOut >= 0 && ctx.hasOutput(static_cast<std::size_t>(io_.dbOut));
    Tensor* dx = wantData ? &ctx.output(static_cast<std::size_t>(io_.dxOut)) : nullptr;
    Tensor* dw = wantWeights ? &ctx.output(static_cast<std::size_t>(io_.dwOut)) : nullptr;
    Tensor* db = wantBias ? &ctx.output(static_cast<std::size_t>(io_.dbOut)) : nullptr;
    if (empty_) {
      for (Tensor* t : {dx, dw, db}) {
        if (t != nullptr && t->bytes() > 0)
          std::memset(t->rawData(), 0, t->bytes());
      }
      return;
    }
    const Tensor& dy = ctx.input(0);
    if (setup_.dtype == DType::Float64) {
      if (dx != nullptr) {
        convGradInputF64(setup_.geometry, setup_.x, setup_.w, setup_.group, dy.data<double>(),
                         ctx.input(static_cast<std::size_t>(io_.wIndex)).data<double>(), dx->data<double>());
      }
      if (dw != nullptr || db != nullptr) {
        // dW is computed even when only dB is wanted: a scratch tensor keeps the loop simple (tests only).
        Tensor scratch;
        if (dw == nullptr)
          scratch = Tensor::empty(DType::Float64, setup_.w, MemoryCategory::Workspace);
        convGradWeightF64(setup_.geometry, setup_.x, setup_.w, setup_.group, dy.data<double>(),
                          ctx.input(static_cast<std::size_t>(io_.xIndex)).data<double>(),
                          dw != nullptr ? dw->data<double>() : scratch.data<double>(),
                          db != nullptr ? db->data<double>() : nullptr);
      }
      return;
    }
    char* scratch = static_cast<char*>(dnnlScratchpad(totalScratchBytes_));
    const std::size_t primBytes = primitiveScratchBytes_;
    bool dyConverted = false;
    // With pruned taps dW is computed into a dense cropped copy and scattered into the full dW afterwards.
    auto* croppedDw = reinterpret_cast<float*>(scratch + croppedDwOffset_);
    float* dwTarget = dw == nullptr ? nullptr : (taps_.pruned ? croppedDw : dw->data<float>());
    if (reshaped_ != nullptr) {
      reshaped_->backward(dy.data<float>(),
                          dw != nullptr ? ctx.input(static_cast<std::size_t>(io_.xIndex)).data<float>() : nullptr,
                          dx != nullptr ? ctx.input(static_cast<std::size_t>(io_.wIndex)).data<float>() : nullptr,
                          dx != nullptr ? dx->data<float>() : nullptr, dw != nullptr ? dw->data<float>() : nullptr,
                          db != nullptr ? db->data<float>() : nullptr, scratch);
      return;
    }
    if (gemm_ != nullptr) {
      const float* w = dx != nullptr ? croppedWeights(ctx, scratch) : nullptr;
      const float* x = dw != nullptr ? ctx.input(static_cast<std::size_t>(io_.xIndex)).data<float>() : nullptr;
      gemm_->backward(dy.data<float>(), x, w, dx != nullptr ? dx->data<float>() : nullptr, dwTarget,
                      db != nullptr ? db->data<float>() : nullptr, scratch);
      if (dw != nullptr && taps_.pruned)
        scatterTaps(croppedDw, dw->data<float>(), fullW_, taps_, channelsLast_);
      return;
    }
    if ((dw != nullptr || db != nullptr) && batched_) {
      Tensor dwScratch;
      if (dw == nullptr)
        dwScratch = Tensor::empty(DType::Float32, setup_.w, MemoryCategory::Workspace);
      batchedWeights_.run(setup_, dy.data<float>(), ctx.input(static_cast<std::size_t>(io_.xIndex)).data<float>(),
                          dw != nullptr ? dwTarget : dwScratch.data<float>(),
                          db != nullptr ? db->data<float>() : nullptr, scratch);
    } else if ((dw != nullptr || db != nullptr) && depthwiseWeights_) {
      depthwiseWeights_->run(dy.data<float>(), ctx.input(static_cast<std::size_t>(io_.xIndex)).data<float>(), dwTarget,
                             db != nullptr ? db->data<float>() : nullptr, scratch + depthwiseOffset_);
    } else if (dw != nullptr || db != nullptr) {
      // Weights first: dY's blocked copy is then shared with the data pass, and X's region is reused for dX.
      memory& dyMem = dyWeights_.bind(dy, scratch, primBytes, true);
      dyConverted = dyWeights_.needed;
      memory& xMem = xWeights_.bind(ctx.input(static_cast<std::size_t>(io_.xIndex)), scratch, primBytes, true);
      Tensor dwScratch;  // dB alone still needs somewhere to put dW
      if (dw == nullptr)
        dwScratch = Tensor::empty(DType::Float32, setup_.w, MemoryCategory::Workspace);
      memory& dwMem = dwWeights_.bind(dw != nullptr ? dwTarget : dwScratch.data<float>(), scratch, primBytes, false);
      std::unordered_map<int, memory> args{
          {DNNL_ARG_SRC, xMem}, {DNNL_ARG_DIFF_DST, dyMem}, {DNNL_ARG_DIFF_WEIGHTS, dwMem}};
      Tensor dbScratch;
      if (hasBiasPrimitive_) {
        if (db == nullptr)
          dbScratch = Tensor::empty(DType::Float32, {setup_.w[0]}, MemoryCategory::Workspace);
        bindDnnl(dbMemory_, db != nullptr ? *db : dbScratch);
        args[DNNL_ARG_DIFF_BIAS] = dbMemory_;
      }
      executeDnnlAt(weightsPrimitive_, args, scratch, primBytes);
      if (dw != nullptr)
        dwWeights_.copyOut(scratch, primBytes);
    }
    if (dw != nullptr && taps_.pruned)
      scatterTaps(croppedDw, dw->data<float>(), fullW_, taps_, channelsLast_);
    if (dx != nullptr && winogradData_ != nullptr) {
      // Its own scratchpad: nothing of the weights pass is needed any more.
      winogradData_->run(dy.data<float>(), ctx.input(static_cast<std::size_t>(io_.wIndex)).data<float>(), nullptr,
                         dx->data<float>(), static_cast<char*>(dnnlScratchpad(winogradData_->scratchBytes())));
    } else if (dx != nullptr && smallGroupData_) {
      smallGroupData_->dataGradient(dy.data<float>(), ctx.input(static_cast<std::size_t>(io_.wIndex)).data<float>(),
                                    dx->data<float>(),
                                    static_cast<char*>(dnnlScratchpad(smallGroupData_->scratchBytes())));
    } else if (dx != nullptr) {
      memory* dyMem = nullptr;
      if (shareDy_ && dyConverted) {
        dyMem = &dyWeights_.converted;
      } else {
        dyMem = &dyData_.bind(dy, scratch, primBytes, true);
      }
      memory& wMem = wData_.bind(croppedWeights(ctx, scratch), scratch, primBytes, true);
      memory& dxMem = dxData_.bind(*dx, scratch, primBytes, false);
      std::unordered_map<int, memory> args{
          {DNNL_ARG_DIFF_DST, *dyMem}, {DNNL_ARG_WEIGHTS, wMem}, {DNNL_ARG_DIFF_SRC, dxMem}};
      executeDnnlAt(dataPrimitive_, args, scratch, primBytes);
      dxData_.copyOut(scratch, primBytes);
    }
  }

 private:
  void createPrimitives() {
    const ConvGradSetup& s = setup_;
    const std::size_t n = s.geometry.kernel.size();
    const std::vector<std::int64_t> spatial(s.x.begin() + 2, s.x.end());
    memory::dims padEnd(n), dilations(n);
    for (std::size_t i = 0; i < n; ++i) {
      padEnd[i] = dnnlPadEnd(s.geometry, spatial, i);
      dilations[i] = s.geometry.dilations[i] - 1;  // oneDNN counts dilation from 0
    }
    const memory::dims strides = toDims(s.geometry.strides);
    const memory::dims padBegin = toDims(s.geometry.padBegin);
    const Shape wDims = groupedWeightDims(s.w, s.group);
    const memory::desc xPlain = activationDesc(s.x, channelsLast_);
    const memory::desc yPlain = activationDesc(s.y, channelsLast_);
    const memory::desc wPlain = descWithInnermost(wDims, weightInnermost(channelsLast_, s.group > 1));
    const memory::desc wAny(toDims(wDims), memory::data_type::f32, memory::format_tag::any);
    const memory::desc xConv(toDims(s.x), memory::data_type::f32, memory::format_tag::any);
    const memory::desc yConv(toDims(s.y), memory::data_type::f32, memory::format_tag::any);
    const bool wantData = io_.dxOut >= 0 && winogradData_ == nullptr;
    const bool wantWeights = io_.dwOut >= 0;
    hasBiasPrimitive_ = io_.dbOut >= 0;
    const memory::desc biasDesc = hasBiasPrimitive_ ? plainDesc({s.w[0]}) : memory::desc();

    dnnl::convolution_forward::desc fwdDesc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                            xConv, wAny, biasDesc, yConv, strides, dilations, padBegin, padEnd);
    dnnl::convolution_forward::primitive_desc fwdPd(fwdDesc, dnnlEngine());
    std::size_t primBytes = 0;
    // Scratchpad regions after the primitives' own: dY's copy, then X's copy for the weights pass (reused for dX's
    // in the data pass, which runs after it), then the small weight copies.
    std::size_t dyRegion = 0, activationRegion = 0, ownLoopEnd = 0;
    if (wantWeights) {
      dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, xConv, wAny, biasDesc, yConv,
                                                    strides, dilations, padBegin, padEnd);
      dnnl::convolution_backward_weights::primitive_desc pd(desc, userScratchpadAttr(), dnnlEngine(), fwdPd);
      weightsPrimitive_ = dnnl::convolution_backward_weights(pd);
      weightsImplementation_ = pd.impl_info_str();
      if (planBatchedWeights(weightsImplementation_)) {
        // Note [Batched weight gradient]: the primitive above is not run.
        weightsImplementation_ =
            setup_.group > 1 ? "batched im2col + oneDNN sgemm per group" : "batched im2col + oneDNN sgemm";
      } else if (planDepthwiseWeights(weightsImplementation_)) {
        // Note [Depthwise weight gradient], Note [Small-group weight gradient]: nor here.
        weightsImplementation_ = depthwiseWeights_->name();
      } else {
        primBytes = std::max(primBytes, pd.scratchpad_desc().get_size());
        primBytes = std::max(primBytes, dyWeights_.init(yPlain, pd.diff_dst_desc(), true));
        primBytes = std::max(primBytes, xWeights_.init(xPlain, pd.src_desc(), true));
        primBytes = std::max(primBytes, dwWeights_.init(wPlain, pd.diff_weights_desc(), false));
        if (hasBiasPrimitive_)
          dbMemory_ = memory(biasDesc, dnnlEngine(), nullptr);
        dyRegion = std::max(dyRegion, alignUp(dyWeights_.bytes));
        activationRegion = std::max(activationRegion, alignUp(xWeights_.bytes));
      }
    }
    if (wantData) {
      dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, xConv, wAny, yConv, strides,
                                                 dilations, padBegin, padEnd);
      dnnl::convolution_backward_data::primitive_desc pd(desc, userScratchpadAttr(), dnnlEngine(), fwdPd);
      dataPrimitive_ = dnnl::convolution_backward_data(pd);
      dataImplementation_ = pd.impl_info_str();
      // Note [Small-group convolutions]: where oneDNN's choice is its GEMM per image and group.
      if (!taps_.pruned && dataImplementation_.find("gemm") != std::string::npos)
        smallGroupData_ = SmallGroupConv::plan(s.x, s.w, s.group, s.geometry, channelsLast_);
      primBytes = std::max(primBytes, pd.scratchpad_desc().get_size());
      primBytes = std::max(primBytes, dyData_.init(yPlain, pd.diff_dst_desc(), true));
      primBytes = std::max(primBytes, wData_.init(wPlain, pd.weights_desc(), true));
      primBytes = std::max(primBytes, dxData_.init(xPlain, pd.diff_src_desc(), false));
      shareDy_ =
          wantWeights && dyWeights_.needed && dyData_.needed && pd.diff_dst_desc() == dyWeights_.converted.get_desc();
      dyRegion = std::max(dyRegion, alignUp(dyData_.bytes));
      activationRegion = std::max(activationRegion, alignUp(dxData_.bytes));
    }
    primitiveScratchBytes_ = primBytes;
    std::size_t offset = alignUp(primBytes);
    if (batched_) {  // its copies sit after the primitives' own scratchpads; no reorder runs beside them
      batchedWeights_.dyOffset = offset;
      batchedWeights_.columnOffset = offset + alignUp(batchedWeights_.dyBytes());
      ownLoopEnd = batchedWeights_.columnOffset + alignUp(batchedWeights_.columnBytes());
    } else if (depthwiseWeights_) {  // the same for the depthwise loop's NHWC copies
      depthwiseOffset_ = offset;
      ownLoopEnd = offset + alignUp(depthwiseWeights_->scratchBytes());
    }
    dyWeights_.offset = dyData_.offset = offset;
    offset += dyRegion;
    xWeights_.offset = dxData_.offset = offset;
    offset += activationRegion;
    dwWeights_.offset = offset;
    offset += alignUp(dwWeights_.bytes);
    wData_.offset = offset;
    offset += alignUp(wData_.bytes);
    planCroppedCopies(std::max(offset, ownLoopEnd));
  }

  // Places the dense cropped W (data pass) and dW (weights pass) of Note [Pruned taps] at `offset` in the
  // scratchpad, and sets its total size.
  void planCroppedCopies(std::size_t offset) {
    if (taps_.pruned) {
      const std::size_t croppedBytes = static_cast<std::size_t>(numElements(setup_.w)) * sizeof(float);
      croppedWOffset_ = offset;
      croppedDwOffset_ = croppedWOffset_ + alignUp(croppedBytes);
      offset = croppedDwOffset_ + alignUp(croppedBytes);
    }
    totalScratchBytes_ = offset;
  }

  // W as the kernel runs it: the input itself, or its used taps gathered into the scratchpad.
  const float* croppedWeights(KernelContext& ctx, char* scratch) const {
    const float* w = ctx.input(static_cast<std::size_t>(io_.wIndex)).data<float>();
    if (!taps_.pruned)
      return w;
    auto* cropped = reinterpret_cast<float*>(scratch + croppedWOffset_);
    gatherTaps(w, cropped, fullW_, taps_, channelsLast_);
    return cropped;
  }

  // Whether the weight gradient runs as one batched GEMM (Note [Batched weight gradient]); sets batchedWeights_.
  bool planBatchedWeights(const std::string& oneDnnImplementation) {
    const ConvGradSetup& s = setup_;
    if (oneDnnImplementation.find("gemm:jit") == std::string::npos || s.x.size() != 4)
      return false;
    if (s.group > 1 && (s.w[1] == 1 || s.y[2] * s.y[3] > ConvGemm::kMaxGemmPixels))
      return false;  // depthwise: Note [Depthwise weight gradient]; larger maps: oneDNN's GEMMs are long enough
    BatchedWeightGradient b;
    b.channelsLast = channelsLast_;
    b.groups = s.group;
    b.images = s.x[0];
    b.channels = s.x[1];
    b.outChannels = s.w[0];
    b.pixels = s.y[2] * s.y[3];
    b.columns = s.x[1] * s.w[2] * s.w[3];
    if (b.dyBytes() + b.columnBytes() > BatchedWeightGradient::kMaxBatchedBytes)
      return false;
    batchedWeights_ = b;
    batched_ = true;
    return true;
  }

  // Whether the weight gradient runs as one of Strata's own loops (planBatchedWeights or planDepthwiseWeights).
  bool ownWeightsLoop() const { return batched_ || depthwiseWeights_.has_value(); }

  // Whether the weight gradient runs as Note [Depthwise weight gradient]'s loop: a depthwise convolution for
  // which oneDNN offers only a GEMM per image and channel. Sets depthwiseWeights_.
  bool planDepthwiseWeights(const std::string& oneDnnImplementation) {
    if (oneDnnImplementation.find("gemm") == std::string::npos)
      return false;
    depthwiseWeights_ = DepthwiseWeightGradient::plan(setup_.x, setup_.w, setup_.group, setup_.geometry, channelsLast_);
    return depthwiseWeights_.has_value();
  }

  ConvGradSetup setup_;
  bool empty_ = false;
  ConvGradOperands io_;  // positions of the operands and outputs
  dnnl::convolution_backward_weights weightsPrimitive_;
  dnnl::convolution_backward_data dataPrimitive_;
  bool hasBiasPrimitive_ = false;
  bool batched_ = false;  // the weight gradient runs as batchedWeights_ instead of weightsPrimitive_
  BatchedWeightGradient batchedWeights_;
  std::optional<DepthwiseWeightGradient> depthwiseWeights_;  // set: the weight gradient runs as this loop
  std::optional<SmallGroupConv> smallGroupData_;             // set: the data gradient runs as this loop
  std::size_t depthwiseOffset_ = 0;                          // its scratchpad region
  std::string weightsImplementation_, dataImplementation_;
  bool shareDy_ = false;                         // both passes take dY in the same converted layout: convert it once
  LayoutCopy dyWeights_, xWeights_, dwWeights_;  // the weights pass
  LayoutCopy dyData_, wData_, dxData_;           // the data pass
  memory dbMemory_;
  std::size_t primitiveScratchBytes_ = 0;       // the largest scratchpad of the primitives and reorders
  std::size_t totalScratchBytes_ = 0;           // plus the converted copies
  bool channelsLast_ = false;                   // Note [CPU channels-last]: operands NHWC and KRSC; setup_ logical
  TapCrop taps_;                                // Note [Pruned taps]: setup_ then holds the cropped kernel
  std::unique_ptr<ConvGemm> gemm_;              // Note [Convolutions as one GEMM]: set instead of the primitives
  std::unique_ptr<ReshapedGemmConv> reshaped_;  // Notes [Whole-map convolutions], [Small maps as batch columns]
  std::unique_ptr<ConvWinograd> winogradData_;  // Note [Winograd convolutions]: set instead of dataPrimitive_
  Shape fullW_;                                 // W's own shape
  std::size_t croppedWOffset_ = 0, croppedDwOffset_ = 0;
};

void addConvGradOp(OpRegistry& registry, const std::string& type, ConvGradMode mode) {
  registry.addSchema({type, [mode](const ShapeContext& ctx) { return inferConvGrad(mode, ctx); }, true});
  registry.addKernel(
      type, DeviceType::CPU,
      [mode](const KernelInit& init) -> std::unique_ptr<OpKernel> {
        return std::make_unique<ConvGradKernel>(mode, init);
      },
      // Note [CPU channels-last]: float32 runs NHWC activations and KRSC weights itself.
      [](const KernelInit& init) { return init.inputs.at(0).meta.dtype == DType::Float32; });
}

}  // namespace

void registerConvGradOps(OpRegistry& registry) {
  addConvGradOp(registry, "ConvGradInput", ConvGradMode::Input);
  addConvGradOp(registry, "ConvGradWeight", ConvGradMode::Weight);
  addConvGradOp(registry, "ConvGrad", ConvGradMode::Both);
}

}  // namespace strata::cpu::grad_nn
