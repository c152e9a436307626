// Gemm and MatMul: float32 on oneDNN's matmul primitive (batched, broadcasting); float64 and integers on a direct
// loop (the ONNX conformance suite has a few of those, never on a hot path).

#include <algorithm>
#include <memory>
#include <numeric>

#include <fmt/format.h>

#include "dnnl_context.h"
#include "matmul_shape.h"
#include "strata/thread_pool.h"

namespace strata::cpu {
namespace {

using dnnl::memory;

bool isLoopType(DType dtype) {
  return dtype == DType::Float64 || dtype == DType::Int32 || dtype == DType::Int64;
}

void checkMatmulTypes(const TensorMeta& a, const TensorMeta& b) {
  if (a.dtype != b.dtype)
    fail("A is {} but B is {}; they must match", dtypeName(a.dtype), dtypeName(b.dtype));
  if (a.dtype != DType::Float32 && !isLoopType(a.dtype)) {
    fail("supported types are float32, float64, int32 and int64, got {}", dtypeName(a.dtype));
  }
}

template <typename T>
using Accumulator = std::conditional_t<std::is_integral_v<T>, std::int64_t, double>;

// ---- Gemm: Y = alpha * A' B' + beta * C ----

struct GemmSetup {
  std::int64_t m = 0, n = 0, k = 0;
  bool transA = false, transB = false;
  float alpha = 1, beta = 1;
  bool hasC = false;
  Shape c2d;  // C as a 2-D [rows, cols] with rows in {1, M}, cols in {1, N}
};

GemmSetup resolveGemm(const Attributes& attrs, const TensorMeta& a, const TensorMeta& b, const TensorMeta* c) {
  checkMatmulTypes(a, b);
  if (a.shape.size() != 2)
    fail("A must be 2-D, got {}", shapeToString(a.shape));
  if (b.shape.size() != 2)
    fail("B must be 2-D, got {}", shapeToString(b.shape));
  GemmSetup s;
  s.transA = attrs.getInt("transA", 0) != 0;
  s.transB = attrs.getInt("transB", 0) != 0;
  s.alpha = attrs.getFloat("alpha", 1.0f);
  s.beta = attrs.getFloat("beta", 1.0f);
  s.m = s.transA ? a.shape[1] : a.shape[0];
  s.k = s.transA ? a.shape[0] : a.shape[1];
  const std::int64_t kb = s.transB ? b.shape[1] : b.shape[0];
  s.n = s.transB ? b.shape[0] : b.shape[1];
  if (s.k != kb) {
    fail("inner dimensions differ: A{} gives K = {} but B{} gives K = {} (transA {}, transB {})",
         shapeToString(a.shape), s.k, shapeToString(b.shape), kb, s.transA, s.transB);
  }
  if (c != nullptr) {
    if (c->dtype != a.dtype)
      fail("C is {} but A is {}", dtypeName(c->dtype), dtypeName(a.dtype));
    if (c->shape.size() > 2)
      fail("C must have rank <= 2, got {}", shapeToString(c->shape));
    s.hasC = true;
    s.c2d = c->shape;
    while (s.c2d.size() < 2)
      s.c2d.insert(s.c2d.begin(), 1);
    if ((s.c2d[0] != 1 && s.c2d[0] != s.m) || (s.c2d[1] != 1 && s.c2d[1] != s.n)) {
      fail("C {} does not broadcast to the output [{}, {}]", shapeToString(c->shape), s.m, s.n);
    }
  }
  return s;
}

std::vector<TensorMeta> inferGemm(const ShapeContext& ctx) {
  if (!ctx.hasInput(0) || !ctx.hasInput(1))
    ctx.error("Gemm needs inputs A and B");
  try {
    const TensorMeta* c = ctx.hasInput(2) ? &ctx.input(2).meta : nullptr;
    GemmSetup s = resolveGemm(ctx.attrs, ctx.input(0).meta, ctx.input(1).meta, c);
    return {TensorMeta{ctx.input(0).meta.dtype, {s.m, s.n}}};
  } catch (const Error& e) {
    ctx.error(e.what());
  }
}

// Writes C broadcast to [M, N] into y, times `scale`.
template <typename T>
void broadcastC(const GemmSetup& s, const Tensor& c, Tensor& y, double scale) {
  const T* src = c.data<T>();
  T* dst = y.data<T>();
  const std::int64_t rowStride = s.c2d[0] == 1 ? 0 : s.c2d[1];
  const std::int64_t colStride = s.c2d[1] == 1 ? 0 : 1;
  for (std::int64_t i = 0; i < s.m; ++i) {
    for (std::int64_t j = 0; j < s.n; ++j) {
      dst[i * s.n + j] = static_cast<T>(scale * static_cast<double>(src[i * rowStride + j * colStride]));
    }
  }
}

constexpr std::int64_t kLoopColumns = 64;  // output columns per task of the direct loops

// Tasks per chunk so that small products stay on the calling thread (about 16k multiply-adds at least).
std::int64_t loopGrain(std::int64_t depth, std::int64_t n) {
  return std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, depth * std::min(n, kLoopColumns)));
}

// One output row chunk out[j] (j < cols) += sum_k a(k) * b(k, j0 + j), where b(k, j) = pb[k * bk + j * bj]. The loop
// order keeps the inner loop on contiguous memory: over j when B's rows are contiguous (bj == 1), else over k.
template <typename T>
void accumulateRow(const T* pa, std::int64_t ak, const T* pb, std::int64_t bk, std::int64_t bj, std::int64_t depth,
                   std::int64_t j0, std::int64_t cols, Accumulator<T>* out) {
  if (bj == 1) {
    for (std::int64_t kk = 0; kk < depth; ++kk) {
      const auto av = static_cast<Accumulator<T>>(pa[kk * ak]);
      const T* row = pb + kk * bk + j0;
      for (std::int64_t j = 0; j < cols; ++j)
        out[j] += av * static_cast<Accumulator<T>>(row[j]);
    }
  } else {
    for (std::int64_t j = 0; j < cols; ++j) {
      const T* column = pb + (j0 + j) * bj;
      Accumulator<T> acc = 0;
      for (std::int64_t kk = 0; kk < depth; ++kk) {
        acc += static_cast<Accumulator<T>>(pa[kk * ak]) * static_cast<Accumulator<T>>(column[kk * bk]);
      }
      out[j] += acc;
    }
  }
}

template <typename T>
void naiveGemm(const GemmSetup& s, const Tensor& a, const Tensor& b, const Tensor* c, Tensor& y) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* py = y.data<T>();
  const bool useC = c != nullptr && s.beta != 0.0f;
  if (useC)
    broadcastC<T>(s, *c, y, s.beta);
  const std::int64_t colBlocks = (s.n + kLoopColumns - 1) / kLoopColumns;
  // A(i, k) = pa[i * ai + k * ak], B(k, j) = pb[k * bk + j * bj].
  const std::int64_t ai = s.transA ? 1 : s.k, ak = s.transA ? s.m : 1;
  const std::int64_t bk = s.transB ? 1 : s.n, bj = s.transB ? s.k : 1;
  parallelFor(0, s.m * colBlocks, loopGrain(s.k, s.n), [&](std::int64_t begin, std::int64_t end) {
    Accumulator<T> acc[kLoopColumns];
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t i = t / colBlocks;
      const std::int64_t j0 = (t % colBlocks) * kLoopColumns;
      const std::int64_t cols = std::min(kLoopColumns, s.n - j0);
      std::fill(acc, acc + cols, Accumulator<T>{0});
      accumulateRow<T>(pa + i * ai, ak, pb, bk, bj, s.k, j0, cols, acc);
      for (std::int64_t j = 0; j < cols; ++j) {
        T& out = py[i * s.n + j0 + j];
        const double value =
            static_cast<double>(s.alpha) * static_cast<double>(acc[j]) + (useC ? static_cast<double>(out) : 0.0);
        out = static_cast<T>(value);
      }
    }
  });
}

class GemmKernel : public OpKernel {
 public:
  explicit GemmKernel(const KernelInit& init) {
    const bool hasC = init.inputs.size() > 2 && init.inputs[2].present;
    setup_ =
        resolveGemm(init.attrs, init.inputs.at(0).meta, init.inputs.at(1).meta, hasC ? &init.inputs[2].meta : nullptr);
    dtype_ = init.inputs[0].meta.dtype;
    if (dtype_ != DType::Float32 || setup_.m * setup_.n * setup_.k == 0)
      return;  // the loop handles these
    const GemmSetup& s = setup_;
    // Transposes are strides, not copies.
    const memory::desc aDesc({s.m, s.k}, memory::data_type::f32,
                             s.transA ? memory::dims{1, s.m} : memory::dims{s.k, 1});
    const memory::desc bDesc({s.k, s.n}, memory::data_type::f32,
                             s.transB ? memory::dims{1, s.k} : memory::dims{s.n, 1});
    const memory::desc yDesc = plainDesc({s.m, s.n});
    dnnl::primitive_attr attr = userScratchpadAttr();
    memory::desc biasDesc;
    if (s.hasC && s.alpha == 1.0f && s.beta == 1.0f && s.c2d[0] == 1) {
      // The nn.Linear case: C is the matmul's bias, broadcast by oneDNN.
      mode_ = CMode::Bias;
      biasDesc = plainDesc(s.c2d);
    } else {
      if (s.alpha != 1.0f)
        attr.set_output_scales(0, {s.alpha});
      if (s.hasC && s.beta != 0.0f) {
        // Y is prefilled with C; the sum post-op adds beta * Y to alpha * A'B'.
        mode_ = CMode::Sum;
        dnnl::post_ops ops;
        ops.append_sum(s.beta);
        attr.set_post_ops(ops);
      }
    }
    withDnnlErrors(init.nodeName, "create the Gemm matmul", [&] {
      dnnl::matmul::desc desc = mode_ == CMode::Bias ? dnnl::matmul::desc(aDesc, bDesc, biasDesc, yDesc)
                                                     : dnnl::matmul::desc(aDesc, bDesc, yDesc);
      dnnl::matmul::primitive_desc pd(desc, attr, dnnlEngine());
      primitive_ = dnnl::matmul(pd);
      implementation_ = "oneDNN " + std::string(pd.impl_info_str());
      scratchpadBytes_ = pd.scratchpad_desc().get_size();
      a_ = memory(aDesc, dnnlEngine(), nullptr);
      b_ = memory(bDesc, dnnlEngine(), nullptr);
      y_ = memory(yDesc, dnnlEngine(), nullptr);
      if (mode_ == CMode::Bias)
        bias_ = memory(biasDesc, dnnlEngine(), nullptr);
    });
    useDnnl_ = true;
  }

  std::string implementation() const override { return implementation_.empty() ? "direct loop" : implementation_; }

  void compute(KernelContext& ctx) override {
    const Tensor* c = ctx.hasInput(2) ? &ctx.input(2) : nullptr;
    Tensor& y = ctx.output(0);
    if (!useDnnl_) {
      switch (dtype_) {
        case DType::Float32:
          naiveGemm<float>(setup_, ctx.input(0), ctx.input(1), c, y);
          break;
        case DType::Float64:
          naiveGemm<double>(setup_, ctx.input(0), ctx.input(1), c, y);
          break;
        case DType::Int32:
          naiveGemm<std::int32_t>(setup_, ctx.input(0), ctx.input(1), c, y);
          break;
        case DType::Int64:
          naiveGemm<std::int64_t>(setup_, ctx.input(0), ctx.input(1), c, y);
          break;
        default:
          fail("Gemm: unsupported dtype {}", dtypeName(dtype_));
      }
      return;
    }
    bindDnnl(a_, ctx.input(0));
    bindDnnl(b_, ctx.input(1));
    bindDnnl(y_, y);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, y_}};
    if (mode_ == CMode::Bias) {
      bindDnnl(bias_, *c);
      args[DNNL_ARG_BIAS] = bias_;
    } else if (mode_ == CMode::Sum) {
      broadcastC<float>(setup_, *c, y, 1.0);
    }
    executeDnnl(primitive_, args, scratchpadBytes_);
  }

 private:
  std::string implementation_;  // empty when the direct loop runs
  enum class CMode { None, Bias, Sum };
  GemmSetup setup_;
  DType dtype_ = DType::Float32;
  CMode mode_ = CMode::None;
  bool useDnnl_ = false;
  dnnl::matmul primitive_;
  std::size_t scratchpadBytes_ = 0;
  memory a_, b_, y_, bias_;
};

// ---- MatMul: numpy matmul semantics ----

using MatmulSetup = MatmulShape;

MatmulSetup resolveMatmul(const TensorMeta& a, const TensorMeta& b) {
  checkMatmulTypes(a, b);
  if (a.shape.empty() || b.shape.empty()) {
    fail("operands must have rank >= 1, got A{} and B{}", shapeToString(a.shape), shapeToString(b.shape));
  }
  return matmulShape(a.shape, b.shape);
}

std::vector<TensorMeta> inferMatmul(const ShapeContext& ctx) {
  if (!ctx.hasInput(0) || !ctx.hasInput(1))
    ctx.error("MatMul needs inputs A and B");
  try {
    MatmulSetup s = resolveMatmul(ctx.input(0).meta, ctx.input(1).meta);
    if (ctx.hasInput(2)) {  // Note [MatMul bias fusion]: Strata's own third input
      const TensorMeta& bias = ctx.input(2).meta;
      if (bias.dtype != DType::Float32 || ctx.input(0).meta.dtype != DType::Float32 || numElements(s.batchB) != 1 ||
          numElements(bias.shape) != s.n) {
        ctx.error(fmt::format("a fused bias needs float32 operands, a 2-D B and {} bias values, got A {} and bias {}",
                              s.n, ctx.input(0).meta.toString(), bias.toString()));
      }
    }
    return {TensorMeta{ctx.input(0).meta.dtype, s.output}};
  } catch (const Error& e) {
    ctx.error(e.what());
  }
}

template <typename T>
void naiveMatmul(const MatmulSetup& s, const Tensor& a, const Tensor& b, Tensor& y) {
  const std::size_t r = s.batch.size();
  // Element strides of each batch dim, 0 where the operand broadcasts.
  std::vector<std::int64_t> strideA(r), strideB(r);
  std::int64_t sa = s.m * s.k, sb = s.k * s.n;
  for (std::size_t d = r; d-- > 0;) {
    strideA[d] = s.batchA[d] == 1 ? 0 : sa;
    strideB[d] = s.batchB[d] == 1 ? 0 : sb;
    sa *= s.batchA[d];
    sb *= s.batchB[d];
  }
  const std::int64_t batches = numElements(s.batch);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* py = y.data<T>();
  const std::int64_t colBlocks = (s.n + kLoopColumns - 1) / kLoopColumns;
  // One task per (batch, row, block of columns).
  parallelFor(0, batches * s.m * colBlocks, loopGrain(s.k, s.n), [&](std::int64_t begin, std::int64_t end) {
    Accumulator<T> acc[kLoopColumns];
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t bi = t / (s.m * colBlocks);
      const std::int64_t i = (t / colBlocks) % s.m;
      const std::int64_t j0 = (t % colBlocks) * kLoopColumns;
      const std::int64_t cols = std::min(kLoopColumns, s.n - j0);
      std::int64_t offA = 0, offB = 0, rest = bi;
      for (std::size_t d = r; d-- > 0;) {
        const std::int64_t idx = rest % s.batch[d];
        rest /= s.batch[d];
        offA += idx * strideA[d];
        offB += idx * strideB[d];
      }
      std::fill(acc, acc + cols, Accumulator<T>{0});
      accumulateRow<T>(pa + offA + i * s.k, 1, pb + offB, s.n, 1, s.k, j0, cols, acc);
      T* out = py + (bi * s.m + i) * s.n + j0;
      for (std::int64_t j = 0; j < cols; ++j)
        out[j] = static_cast<T>(acc[j]);
    }
  });
}

class MatmulKernel : public OpKernel {
 public:
  explicit MatmulKernel(const KernelInit& init) {
    setup_ = resolveMatmul(init.inputs.at(0).meta, init.inputs.at(1).meta);
    dtype_ = init.inputs[0].meta.dtype;
    hasBias_ = init.inputs.size() > 2;
    const MatmulSetup& s = setup_;
    const std::int64_t batches = numElements(s.batch);
    if (hasBias_ && (dtype_ != DType::Float32 || numElements(s.batchB) != 1 || batches * s.m * s.n * s.k == 0)) {
      fail("{}: a fused bias (Note [MatMul bias fusion]) needs float32, a 2-D B and no empty dimension", init.nodeName);
    }
    if (dtype_ != DType::Float32 || batches * s.m * s.n * s.k == 0)
      return;  // the loop handles these
    memory::dims aDims, bDims, yDims;
    const bool sameBatch = s.batchA == s.batchB;
    const bool bShared = numElements(s.batchB) == 1;
    if (bShared) {
      // B has no (real) batch: fold A's batch into its rows, one plain 2-D product.
      const std::int64_t rows = numElements(s.batchA) * s.m;
      aDims = {rows, s.k};
      bDims = {s.k, s.n};
      yDims = {rows, s.n};
    } else if (sameBatch) {
      aDims = {batches, s.m, s.k};
      bDims = {batches, s.k, s.n};
      yDims = {batches, s.m, s.n};
    } else if (numElements(s.batchA) == 1) {
      aDims = {1, s.m, s.k};
      bDims = {batches, s.k, s.n};
      yDims = {batches, s.m, s.n};
    } else {
      // Genuine broadcasting between batch dims: oneDNN broadcasts size-1 batch dims of either operand.
      if (s.batch.size() + 2 > DNNL_MAX_NDIMS) {
        fail("{}: MatMul with {} batch dims exceeds oneDNN's {} dims", init.nodeName, s.batch.size(), DNNL_MAX_NDIMS);
      }
      aDims.assign(s.batchA.begin(), s.batchA.end());
      bDims.assign(s.batchB.begin(), s.batchB.end());
      yDims.assign(s.batch.begin(), s.batch.end());
      aDims.insert(aDims.end(), {s.m, s.k});
      bDims.insert(bDims.end(), {s.k, s.n});
      yDims.insert(yDims.end(), {s.m, s.n});
    }
    const memory::desc aDesc = plainDesc(std::vector<std::int64_t>(aDims.begin(), aDims.end()));
    const memory::desc bDesc = plainDesc(std::vector<std::int64_t>(bDims.begin(), bDims.end()));
    const memory::desc yDesc = plainDesc(std::vector<std::int64_t>(yDims.begin(), yDims.end()));
    const memory::desc biasDesc({1, s.n}, memory::data_type::f32, memory::dims{s.n, 1});  // broadcast over rows
    withDnnlErrors(init.nodeName, "create the MatMul matmul", [&] {
      const dnnl::matmul::desc desc =
          hasBias_ ? dnnl::matmul::desc(aDesc, bDesc, biasDesc, yDesc) : dnnl::matmul::desc(aDesc, bDesc, yDesc);
      dnnl::matmul::primitive_desc pd(desc, userScratchpadAttr(), dnnlEngine());
      primitive_ = dnnl::matmul(pd);
      implementation_ = "oneDNN " + std::string(pd.impl_info_str());
      scratchpadBytes_ = pd.scratchpad_desc().get_size();
      a_ = memory(aDesc, dnnlEngine(), nullptr);
      b_ = memory(bDesc, dnnlEngine(), nullptr);
      y_ = memory(yDesc, dnnlEngine(), nullptr);
      if (hasBias_)
        bias_ = memory(biasDesc, dnnlEngine(), nullptr);
    });
    useDnnl_ = true;
  }

  std::string implementation() const override { return implementation_.empty() ? "direct loop" : implementation_; }

  void compute(KernelContext& ctx) override {
    Tensor& y = ctx.output(0);
    if (!useDnnl_) {
      if (y.numel() == 0)
        return;
      switch (dtype_) {
        case DType::Float32:
          naiveMatmul<float>(setup_, ctx.input(0), ctx.input(1), y);
          break;
        case DType::Float64:
          naiveMatmul<double>(setup_, ctx.input(0), ctx.input(1), y);
          break;
        case DType::Int32:
          naiveMatmul<std::int32_t>(setup_, ctx.input(0), ctx.input(1), y);
          break;
        case DType::Int64:
          naiveMatmul<std::int64_t>(setup_, ctx.input(0), ctx.input(1), y);
          break;
        default:
          fail("MatMul: unsupported dtype {}", dtypeName(dtype_));
      }
      return;
    }
    bindDnnl(a_, ctx.input(0));
    bindDnnl(b_, ctx.input(1));
    bindDnnl(y_, y);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, y_}};
    if (hasBias_) {
      bindDnnl(bias_, ctx.input(2));
      args[DNNL_ARG_BIAS] = bias_;
    }
    executeDnnl(primitive_, args, scratchpadBytes_);
  }

 private:
  std::string implementation_;  // empty when the direct loop runs
  MatmulSetup setup_;
  DType dtype_ = DType::Float32;
  bool hasBias_ = false;  // Note [MatMul bias fusion]: a third input, added to every row
  bool useDnnl_ = false;
  dnnl::matmul primitive_;
  std::size_t scratchpadBytes_ = 0;
  memory a_, b_, y_, bias_;
};

}  // namespace

void registerDnnlMatmulOps(OpRegistry& registry) {
  registry.addSchema({"Gemm", inferGemm, true});
  registry.addKernel("Gemm", DeviceType::CPU, [](const KernelInit& init) -> std::unique_ptr<OpKernel> {
    return std::make_unique<GemmKernel>(init);
  });
  registry.addSchema({"MatMul", inferMatmul, true});
  registry.addKernel("MatMul", DeviceType::CPU, [](const KernelInit& init) -> std::unique_ptr<OpKernel> {
    return std::make_unique<MatmulKernel>(init);
  });
}

}  // namespace strata::cpu
