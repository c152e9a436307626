// Gemm and MatMul on cuBLAS (float32, float64, float16, bfloat16) with the CPU kernels' semantics
// (dnnl_matmul.cpp); int32 / int64, which cuBLAS lacks, run the direct kernels of kernels/nn_matmul.cu.
//
// Row-major products run as column-major ones with the operands swapped: Y = A'B' row-major is Y^T = B'^T A'^T
// column-major, and a row-major [r, c] matrix is a column-major [c, r] one with leading dimension c.
// float32 uses TF32 tensor cores when tf32Enabled() (read when the plan is built), true float32 otherwise.

#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "../cpu/matmul_shape.h"
#include "cuda_context.h"
#include "cuda_ops.h"
#include "cuda_stream.h"
#include "cudnn_common.h"
#include "kernels/nn_kernels.h"

namespace strata::cuda {
namespace {

bool isBlasType(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float64 || dtype == DType::Float16 || dtype == DType::BFloat16;
}

// Data and compute types of a cuBLAS product of `dtype`, and its alpha / beta.
struct BlasTypes {
  cudaDataType_t data = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  bool doubleScale = false;  // alpha / beta are double (CUBLAS_COMPUTE_64F), else float

  explicit BlasTypes(DType dtype) {
    switch (dtype) {
      case DType::Float32:
        data = CUDA_R_32F;
        compute = tf32Enabled() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        break;
      case DType::Float64:
        data = CUDA_R_64F;
        compute = CUBLAS_COMPUTE_64F;
        doubleScale = true;
        break;
      case DType::Float16:
        data = CUDA_R_16F;
        compute = CUBLAS_COMPUTE_32F;
        break;
      case DType::BFloat16:
        data = CUDA_R_16BF;
        compute = CUBLAS_COMPUTE_32F;
        break;
      default:
        fail("cuBLAS products take float32, float64, float16 or bfloat16, not {}", dtypeName(dtype));
    }
  }
};

// A scaling factor in the type cuBLAS expects for the compute type.
class BlasScalar {
 public:
  BlasScalar(double value, bool isDouble) : f_(static_cast<float>(value)), d_(value), double_(isDouble) {}
  const void* get() const { return double_ ? static_cast<const void*>(&d_) : static_cast<const void*>(&f_); }

 private:
  float f_;
  double d_;
  bool double_;
};

cublasOperation_t op(bool transpose) {
  return transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
}

Device deviceOf(const KernelContext& ctx) {
  STRATA_CHECK(ctx.stream != nullptr, "a CUDA kernel was run without a stream");
  return ctx.stream->device();
}

void zeroFill(const KernelContext& ctx, Tensor& t) {
  if (t.bytes() > 0)
    STRATA_CUDA_CHECK(cudaMemsetAsync(t.rawData(), 0, t.bytes(), streamOf(ctx)));
}

std::uint32_t alignmentOf(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t alignment = 1;
  while (alignment < 256 && address % (alignment * 2U) == 0)
    alignment *= 2;
  return alignment;
}

// ---- Gemm: Y = alpha * A' B' + beta * C ----

struct GemmSetup {
  std::int64_t m = 0, n = 0, k = 0;
  bool transA = false, transB = false;
  float alpha = 1, beta = 1;
  bool hasC = false;
  Shape c2d;  // C as [rows, cols] with rows in {1, M}, cols in {1, N}
};

GemmSetup resolveGemm(const KernelInit& init) {
  const Shape& a = init.inputs.at(0).meta.shape;
  const Shape& b = init.inputs.at(1).meta.shape;
  GemmSetup s;
  s.transA = init.attrs.getInt("transA", 0) != 0;
  s.transB = init.attrs.getInt("transB", 0) != 0;
  s.alpha = init.attrs.getFloat("alpha", 1.0f);
  s.beta = init.attrs.getFloat("beta", 1.0f);
  s.m = s.transA ? a.at(1) : a.at(0);
  s.k = s.transA ? a.at(0) : a.at(1);
  s.n = s.transB ? b.at(0) : b.at(1);
  s.hasC = init.inputs.size() > 2 && init.inputs[2].present;
  if (s.hasC) {
    s.c2d = init.inputs[2].meta.shape;
    while (s.c2d.size() < 2)
      s.c2d.insert(s.c2d.begin(), 1);
  }
  return s;
}

// The cuBLASLt product with a bias epilogue for Gemm's nn.Linear case (float32, beta = 1, C of shape [N] or
// [1, N]): Y = alpha * A'B' + C in one kernel instead of a C broadcast and a GEMM that reads it back.
class LtBiasGemm {
 public:
  LtBiasGemm(const GemmSetup& s, cublasComputeType_t compute) {
    STRATA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, compute, CUDA_R_32F));
    const cublasOperation_t opA = op(s.transB);  // Lt's A is Strata's B (see the swap above)
    const cublasOperation_t opB = op(s.transA);
    STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)));
    STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)));
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    STRATA_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    const auto m = static_cast<std::uint64_t>(s.m), n = static_cast<std::uint64_t>(s.n),
               k = static_cast<std::uint64_t>(s.k);
    // Stored matrices as column-major: B is [N, K] (ld N) or, transposed, [K, N] (ld K); A is [K, M] or [M, K].
    STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&aLayout_, CUDA_R_32F, s.transB ? k : n, s.transB ? n : k,
                                                   static_cast<std::int64_t>(s.transB ? k : n)));
    STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&bLayout_, CUDA_R_32F, s.transA ? m : k, s.transA ? k : m,
                                                   static_cast<std::int64_t>(s.transA ? m : k)));
    STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&dLayout_, CUDA_R_32F, n, m, static_cast<std::int64_t>(n)));
    STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference_));
    const std::uint64_t maxWorkspace = kMaxWorkspaceBytes;
    STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                             &maxWorkspace, sizeof(maxWorkspace)));
  }
  ~LtBiasGemm() {
    if (preference_ != nullptr)
      cublasLtMatmulPreferenceDestroy(preference_);
    for (cublasLtMatrixLayout_t layout : {aLayout_, bLayout_, dLayout_}) {
      if (layout != nullptr)
        cublasLtMatrixLayoutDestroy(layout);
    }
    if (desc_ != nullptr)
      cublasLtMatmulDescDestroy(desc_);
  }
  LtBiasGemm(const LtBiasGemm&) = delete;
  LtBiasGemm& operator=(const LtBiasGemm&) = delete;

  // Runs the product; false when cuBLASLt has no algorithm for these pointers' alignment (the caller then uses
  // cuBLAS).
  bool run(const KernelContext& ctx, const void* a, const void* b, const void* bias, void* y, float alpha) {
    STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    // The algorithm depends on how the buffers are aligned: chosen again when that changes (rarely: parameters are
    // views into flat buffers, activations come from the allocator).
    const std::uint32_t alignments[4] = {alignmentOf(a), alignmentOf(b), alignmentOf(bias), alignmentOf(y)};
    if (!heuristicDone_ || !std::equal(alignments, alignments + 4, alignments_)) {
      std::copy(alignments, alignments + 4, alignments_);
      heuristicDone_ = true;
      choose(ctx, alignments);
    }
    if (!available_)
      return false;
    CudaContext& context = contextOf(ctx);
    Tensor workspace = workspaceBytes(workspaceSize_, deviceOf(ctx));
    const float beta = 0.0f;
    // Lt's A is B, its B is A (see the swap above); C is not read with beta = 0.
    STRATA_CUBLAS_CHECK(cublasLtMatmul(context.cublasLt, desc_, &alpha, b, aLayout_, a, bLayout_, &beta, y, dLayout_, y,
                                       dLayout_, &algo_, workspacePointer(workspace), workspaceSize_, streamOf(ctx)));
    return true;
  }

 private:
  static constexpr std::uint64_t kMaxWorkspaceBytes = 32U << 20U;

  void choose(const KernelContext& ctx, const std::uint32_t (&alignments)[4]) {
    // Lt's A is Strata's B and vice versa; D (and C) is Y.
    const std::uint32_t ltA = alignments[1], ltB = alignments[0], ltD = alignments[3];
    STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference_, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                             &ltA, sizeof(ltA)));
    STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference_, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                             &ltB, sizeof(ltB)));
    STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference_, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                             &ltD, sizeof(ltD)));
    STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference_, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                             &ltD, sizeof(ltD)));
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        contextOf(ctx).cublasLt, desc_, aLayout_, bLayout_, dLayout_, dLayout_, preference_, 1, &result, &returned);
    available_ = status == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (available_) {
      algo_ = result.algo;
      workspaceSize_ = result.workspaceSize;
    }
  }

  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t aLayout_ = nullptr, bLayout_ = nullptr, dLayout_ = nullptr;
  cublasLtMatmulPreference_t preference_ = nullptr;
  bool heuristicDone_ = false;
  bool available_ = false;
  std::uint32_t alignments_[4] = {0, 0, 0, 0};
  cublasLtMatmulAlgo_t algo_{};
  std::size_t workspaceSize_ = 0;
};

class GemmKernel : public OpKernel {
 public:
  explicit GemmKernel(const KernelInit& init) : setup_(resolveGemm(init)) {
    dtype_ = init.inputs.at(0).meta.dtype;
    const GemmSetup& s = setup_;
    useC_ = s.hasC && s.beta != 0.0f;
    if (!isBlasType(dtype_))
      return;  // integers: the direct kernel
    types_ = std::make_unique<BlasTypes>(dtype_);
    if (dtype_ == DType::Float32 && useC_ && s.beta == 1.0f && s.c2d[0] == 1 && s.c2d[1] == s.n &&
        s.m * s.n * s.k > 0) {
      lt_ = std::make_unique<LtBiasGemm>(s, types_->compute);
    }
  }

  void compute(KernelContext& ctx) override {
    const GemmSetup& s = setup_;
    Tensor& y = ctx.output(0);
    if (y.numel() == 0)
      return;
    const cudaStream_t stream = streamOf(ctx);
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    const Tensor* c = useC_ ? &ctx.input(2) : nullptr;
    // C broadcast to [M, N]: row stride 0 when C has one row, column stride 0 when it has one column.
    const std::int64_t cRowStride = s.c2d.empty() || s.c2d[0] == 1 ? 0 : s.c2d[1];
    const std::int64_t cColStride = s.c2d.empty() || s.c2d[1] == 1 ? 0 : 1;
    if (types_ == nullptr) {
      if (c != nullptr)
        nn::launchBroadcastFill(dtype_, c->rawData(), y.rawData(), s.m, s.n, cRowStride, cColStride, s.beta, stream);
      nn::launchIntegerGemm(dtype_, a.rawData(), b.rawData(), y.rawData(), s.m, s.n, s.k, s.transA, s.transB,
                            static_cast<double>(s.alpha), c != nullptr, stream);
      return;
    }
    if (s.k == 0) {  // an empty sum: Y = beta * C
      if (c != nullptr) {
        nn::launchBroadcastFill(dtype_, c->rawData(), y.rawData(), s.m, s.n, cRowStride, cColStride, s.beta, stream);
      } else {
        zeroFill(ctx, y);
      }
      return;
    }
    if (lt_ != nullptr && lt_->run(ctx, a.rawData(), b.rawData(), c->rawData(), y.rawData(), s.alpha))
      return;
    // Y prefilled with C; cuBLAS adds alpha * A'B' to beta * Y.
    if (c != nullptr)
      nn::launchBroadcastFill(dtype_, c->rawData(), y.rawData(), s.m, s.n, cRowStride, cColStride, 1.0, stream);
    const BlasScalar alpha(static_cast<double>(s.alpha), types_->doubleScale);
    const BlasScalar beta(c != nullptr ? static_cast<double>(s.beta) : 0.0, types_->doubleScale);
    const std::int64_t lda = s.transA ? s.m : s.k;
    const std::int64_t ldb = s.transB ? s.k : s.n;
    STRATA_CUBLAS_CHECK(cublasGemmEx_64(contextOf(ctx).cublas, op(s.transB), op(s.transA), s.n, s.m, s.k, alpha.get(),
                                        b.rawData(), types_->data, ldb, a.rawData(), types_->data, lda, beta.get(),
                                        y.rawData(), types_->data, s.n, types_->compute, CUBLAS_GEMM_DEFAULT));
  }

 private:
  GemmSetup setup_;
  DType dtype_ = DType::Float32;
  bool useC_ = false;                 // C is given and beta != 0 (beta = 0 ignores C, NaNs included, as on the CPU)
  std::unique_ptr<BlasTypes> types_;  // null for the integer types
  std::unique_ptr<LtBiasGemm> lt_;
};

// ---- MatMul: numpy matmul semantics ----

// MatMul's shapes as the CPU resolves them (matmul_shape.h).
using MatmulSetup = cpu::MatmulShape;

MatmulSetup resolveMatmul(const Shape& a, const Shape& b) {
  return cpu::matmulShape(a, b);
}

// Batch index -> element offset of an operand whose batch dims are `dims` (1 = broadcast) inside `batch`.
Indexer batchIndexer(const Shape& dims, const Shape& batch, std::int64_t matrixSize, const std::string& nodeName) {
  STRATA_CHECK(batch.size() <= static_cast<std::size_t>(kMaxDims), "{}: MatMul on CUDA takes at most {} batch dims",
               nodeName, kMaxDims);
  Indexer indexer;
  indexer.rank = static_cast<int>(batch.size());
  std::int64_t stride = matrixSize;
  for (std::size_t d = batch.size(); d-- > 0;) {
    indexer.sizes[d] = batch[d];
    indexer.strides[d] = dims[d] == 1 ? 0 : stride;
    stride *= dims[d];
  }
  return indexer;
}

class MatmulKernel : public OpKernel {
 public:
  explicit MatmulKernel(const KernelInit& init)
      : setup_(resolveMatmul(init.inputs.at(0).meta.shape, init.inputs.at(1).meta.shape)) {
    dtype_ = init.inputs.at(0).meta.dtype;
    const MatmulSetup& s = setup_;
    batches_ = numElements(s.batch);
    if (isBlasType(dtype_))
      types_ = std::make_unique<BlasTypes>(dtype_);
    if (numElements(s.batchB) == 1) {
      mode_ = Mode::FoldedRows;
    } else if (s.batchA == s.batchB) {
      mode_ = Mode::Strided;
    } else if (numElements(s.batchA) == 1) {
      mode_ = Mode::SharedA;
    } else {
      mode_ = Mode::Pointers;
    }
    if (mode_ == Mode::Pointers || types_ == nullptr) {
      batchA_ = batchIndexer(s.batchA, s.batch, s.m * s.k, init.nodeName);
      batchB_ = batchIndexer(s.batchB, s.batch, s.k * s.n, init.nodeName);
    }
  }

  void compute(KernelContext& ctx) override {
    const MatmulSetup& s = setup_;
    Tensor& y = ctx.output(0);
    if (y.numel() == 0)
      return;
    if (s.k == 0) {
      zeroFill(ctx, y);
      return;
    }
    const void* a = ctx.input(0).rawData();
    const void* b = ctx.input(1).rawData();
    if (types_ == nullptr) {
      nn::launchIntegerMatmul(dtype_, a, b, y.rawData(), batches_, s.m, s.n, s.k, batchA_, batchB_, streamOf(ctx));
      return;
    }
    const cublasHandle_t handle = contextOf(ctx).cublas;
    const BlasScalar one(1.0, types_->doubleScale);
    const BlasScalar zero(0.0, types_->doubleScale);
    const cudaDataType_t t = types_->data;
    switch (mode_) {
      case Mode::FoldedRows: {
        // B has no real batch: A's batch folds into its rows, one plain product.
        const std::int64_t rows = numElements(s.batchA) * s.m;
        STRATA_CUBLAS_CHECK(cublasGemmEx_64(handle, CUBLAS_OP_N, CUBLAS_OP_N, s.n, rows, s.k, one.get(), b, t, s.n, a,
                                            t, s.k, zero.get(), y.rawData(), t, s.n, types_->compute,
                                            CUBLAS_GEMM_DEFAULT));
        break;
      }
      case Mode::Strided:
      case Mode::SharedA: {
        const long long strideA = mode_ == Mode::SharedA ? 0 : s.m * s.k;
        STRATA_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
            handle, CUBLAS_OP_N, CUBLAS_OP_N, s.n, s.m, s.k, one.get(), b, t, s.n, s.k * s.n, a, t, s.k, strideA,
            zero.get(), y.rawData(), t, s.n, s.m * s.n, batches_, types_->compute, CUBLAS_GEMM_DEFAULT));
        break;
      }
      case Mode::Pointers: {
        // Genuine broadcasting between batch dims: per-batch pointers, computed on the device.
        Tensor pointers = Tensor::empty(DType::Int64, {3 * batches_}, MemoryCategory::Workspace, deviceOf(ctx));
        void** p = reinterpret_cast<void**>(pointers.rawData());
        nn::launchBatchPointers(a, b, y.rawData(), dtypeSize(dtype_), batches_, batchA_, batchB_, s.m * s.n, p,
                                streamOf(ctx));
        STRATA_CUBLAS_CHECK(cublasGemmBatchedEx_64(handle, CUBLAS_OP_N, CUBLAS_OP_N, s.n, s.m, s.k, one.get(),
                                                   p + batches_, t, s.n, p, t, s.k, zero.get(), p + 2 * batches_, t,
                                                   s.n, batches_, types_->compute, CUBLAS_GEMM_DEFAULT));
        break;
      }
    }
  }

 private:
  enum class Mode { FoldedRows, Strided, SharedA, Pointers };
  MatmulSetup setup_;
  DType dtype_ = DType::Float32;
  std::int64_t batches_ = 1;
  Mode mode_ = Mode::Strided;
  std::unique_ptr<BlasTypes> types_;  // null for the integer types
  Indexer batchA_, batchB_;           // for the pointer arrays and the integer kernel
};

}  // namespace

void registerBlasKernels(OpRegistry& registry) {
  addCudaKernelFactory(registry, "Gemm", [](const KernelInit& init) -> std::unique_ptr<OpKernel> {
    return std::make_unique<GemmKernel>(init);
  });
  addCudaKernelFactory(registry, "MatMul", [](const KernelInit& init) -> std::unique_ptr<OpKernel> {
    return std::make_unique<MatmulKernel>(init);
  });
}

}  // namespace strata::cuda
