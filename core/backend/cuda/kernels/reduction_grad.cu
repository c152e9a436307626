// Gradient kernels of the reduction family on CUDA (core/backend/cpu/grad_reduction_ops.cpp): SoftmaxGrad and
// LogSoftmaxGrad (softmax.cu), the loss gradients (losses.cu) and LayerNormalizationGrad (here).

#include "cuda_ops.h"
#include "reduce_kernels.cuh"

namespace strata::cuda {

namespace reduce {

namespace {

template <typename A>
struct PairSum {
  A first;
  A second;
};

template <typename A>
struct PairSumCombine {
  __device__ PairSum<A> operator()(PairSum<A> a, PairSum<A> b) const {
    return PairSum<A>{a.first + b.first, a.second + b.second};
  }
};

// LayerNormalizationGrad(dY?, X, Scale, Mean?, InvStdDev?, dMean?, dInvStdDev?) -> dX?, dScale?, dB?. Per row, with
// xhat = (x - mean) * invStd, g = dY * scale and N the row length:
//   dX = invStd * (g - mean(g) - xhat * mean(g * xhat)) + dMean / N - dInvStd * invStd^2 * xhat / N.
// The row statistics come from Mean/InvStdDev or are recomputed with the forward's two-pass formula; when dScale
// or dB are wanted they are also stored (rowMean/rowInvStd) for the column reduction.
template <typename T, typename S>
__global__ void layerNormGradRowsKernel(const T* dy, const T* x, const T* scale, const S* meanIn, const S* invStdIn,
                                        const void* dMean, DType dMeanType, const void* dInvStd, DType dInvStdType,
                                        T* dx, typename AccTypeOf<T>::type* rowMean,
                                        typename AccTypeOf<T>::type* rowInvStd, std::int64_t rows, std::int64_t norm,
                                        typename AccTypeOf<T>::type epsilon) {
  using A = typename AccTypeOf<T>::type;
  const A n = static_cast<A>(norm);
  STRATA_ROW_LOOP(rowBase, rows) {
    const std::int64_t row = rowBase + threadIdx.y;
    const bool active = row < rows;
    const std::int64_t base = (active ? row : 0) * norm;
    A mean = A(0);
    A invStd = A(0);
    if (meanIn != nullptr) {
      if (active) {
        mean = static_cast<A>(meanIn[row]);
        invStd = static_cast<A>(invStdIn[row]);
      }
    } else {
      A sum = A(0);
      if (active) {
        for (std::int64_t i = threadIdx.x; i < norm; i += blockDim.x) {
          sum += cvt<A>(x[base + i]);
        }
      }
      mean = groupAllReduce(sum, SumCombine<A>{}) / n;
      A sq = A(0);
      if (active) {
        for (std::int64_t i = threadIdx.x; i < norm; i += blockDim.x) {
          const A d = cvt<A>(x[base + i]) - mean;
          sq += d * d;
        }
      }
      invStd = A(1) / dSqrt(groupAllReduce(sq, SumCombine<A>{}) / n + epsilon);
    }
    if (active && rowMean != nullptr && threadIdx.x == 0) {
      rowMean[row] = mean;
      rowInvStd[row] = invStd;
    }
    if (dx == nullptr) {
      continue;
    }
    // sum(g) and sum(g * xhat) over the row (0 without dY).
    PairSum<A> sums{A(0), A(0)};
    if (active && dy != nullptr) {
      for (std::int64_t i = threadIdx.x; i < norm; i += blockDim.x) {
        const A g = cvt<A>(dy[base + i]) * cvt<A>(scale[i]);
        const A xhat = (cvt<A>(x[base + i]) - mean) * invStd;
        sums.first += g;
        sums.second += g * xhat;
      }
    }
    sums = groupAllReduce(sums, PairSumCombine<A>{});
    if (!active) {
      continue;
    }
    const A meanG = sums.first / n;
    const A meanGX = sums.second / n;
    const A shift = dMean != nullptr ? loadAs<A>(dMean, dMeanType, row) / n : A(0);
    const A tilt = dInvStd != nullptr ? -loadAs<A>(dInvStd, dInvStdType, row) * invStd * invStd / n : A(0);
    for (std::int64_t i = threadIdx.x; i < norm; i += blockDim.x) {
      const A g = dy != nullptr ? cvt<A>(dy[base + i]) * cvt<A>(scale[i]) : A(0);
      const A xhat = (cvt<A>(x[base + i]) - mean) * invStd;
      dx[base + i] = cvt<T>(invStd * (g - meanG - xhat * meanGX) + shift + tilt * xhat);
    }
  }
}

// dScale = sum over rows of dY * xhat and dB = sum over rows of dY: a column reduction of the [rows, norm] view.
template <typename T>
struct LayerNormParamGradOp {
  using A = typename AccTypeOf<T>::type;
  using Acc = PairSum<A>;

  const T* dy;
  const T* x;
  const A* rowMean;
  const A* rowInvStd;
  T* dScale;
  T* dBias;

  __host__ __device__ Acc init() const { return Acc{A(0), A(0)}; }
  __host__ __device__ Acc map(std::int64_t offset, std::int64_t, std::int64_t r) const {
    const A g = cvt<A>(dy[offset]);
    const A xhat = (cvt<A>(x[offset]) - rowMean[r]) * rowInvStd[r];
    return Acc{g * xhat, g};
  }
  __host__ __device__ Acc combine(Acc a, Acc b) const { return Acc{a.first + b.first, a.second + b.second}; }
  __host__ __device__ void finish(Acc a, std::int64_t i) const {
    if (dScale != nullptr) {
      dScale[i] = cvt<T>(a.first);
    }
    if (dBias != nullptr) {
      dBias[i] = cvt<T>(a.second);
    }
  }
};

void zeroOutput(KernelContext& ctx, std::size_t i, cudaStream_t stream) {
  if (ctx.hasOutput(i) && ctx.output(i).bytes() > 0) {
    STRATA_CUDA_CHECK(cudaMemsetAsync(ctx.output(i).rawData(), 0, ctx.output(i).bytes(), stream));
  }
}

template <typename T, typename S>
void layerNormGradAs(KernelContext& ctx, std::int64_t axis, double epsilon) {
  using A = typename AccTypeOf<T>::type;
  const Tensor& x = ctx.input(1);
  const Shape normShape(x.shape().begin() + axis, x.shape().end());
  const std::int64_t norm = numElements(normShape);
  const std::int64_t rows = norm == 0 ? 0 : x.numel() / norm;
  const cudaStream_t stream = streamOf(ctx);
  T* dx = ctx.hasOutput(0) ? ctx.output(0).data<T>() : nullptr;
  T* dScale = ctx.hasOutput(1) ? ctx.output(1).data<T>() : nullptr;
  T* dBias = ctx.hasOutput(2) ? ctx.output(2).data<T>() : nullptr;
  bool wantParams = dScale != nullptr || dBias != nullptr;
  if (wantParams && (!ctx.hasInput(0) || rows == 0)) {
    // No dY (only the statistics' gradients flow) or no rows: the parameter gradients are zero.
    zeroOutput(ctx, 1, stream);
    zeroOutput(ctx, 2, stream);
    wantParams = false;
  }
  if (rows == 0 || (dx == nullptr && !wantParams)) {
    return;
  }
  Tensor scaleStorage;
  const T* scale = expandTo<T>(ctx.input(2), normShape, scaleStorage, stream);
  const T* dy = ctx.hasInput(0) ? ctx.input(0).data<T>() : nullptr;
  const S* meanIn = ctx.hasInput(3) && ctx.hasInput(4) ? ctx.input(3).data<S>() : nullptr;
  const S* invStdIn = meanIn != nullptr ? ctx.input(4).data<S>() : nullptr;
  const void* dMean = ctx.hasInput(5) ? ctx.input(5).rawData() : nullptr;
  const DType dMeanType = ctx.hasInput(5) ? ctx.input(5).dtype() : DType::Float32;
  const void* dInvStd = ctx.hasInput(6) ? ctx.input(6).rawData() : nullptr;
  const DType dInvStdType = ctx.hasInput(6) ? ctx.input(6).dtype() : DType::Float32;
  Tensor stats;
  A* rowMean = nullptr;
  A* rowInvStd = nullptr;
  if (wantParams) {
    stats = Tensor::empty(TensorMeta{dtypeOf<A>(), Shape{2 * rows}}, MemoryCategory::Workspace, x.device());
    rowMean = stats.data<A>();
    rowInvStd = rowMean + rows;
  }
  const RowLaunch launch = rowLaunch(rows, norm);
  layerNormGradRowsKernel<T, S><<<launch.grid, launch.block, 0, stream>>>(
      dy, x.data<T>(), scale, meanIn, invStdIn, dMean, dMeanType, dInvStd, dInvStdType, dx, rowMean, rowInvStd, rows,
      norm, static_cast<A>(epsilon));
  STRATA_CUDA_CHECK_LAUNCH();
  if (!wantParams) {
    return;
  }
  ReduceGeometry g;
  g.outCount = norm;
  g.reduceCount = rows;
  g.kept.rank = 1;
  g.kept.sizes[0] = norm;
  g.kept.strides[0] = 1;
  g.reduced.rank = 1;
  g.reduced.sizes[0] = rows;
  g.reduced.strides[0] = norm;
  g.innerReduced = false;
  launchReduce(LayerNormParamGradOp<T>{dy, x.data<T>(), rowMean, rowInvStd, dScale, dBias}, g, x.device(), stream);
}

void registerLayerNormGrad(OpRegistry& registry) {
  addCudaKernelFactory(registry, "LayerNormalizationGrad", [](const KernelInit& init) {
    const std::int64_t axisAttr = init.attrs.getInt("axis", -1);
    const double epsilon = init.attrs.getFloat("epsilon", 1e-5f);
    return makeFunctionKernel([axisAttr, epsilon](KernelContext& ctx) {
      const Tensor& x = ctx.input(1);
      const std::int64_t axis = normalizeAxis(axisAttr, x.rank());
      const DType stash = ctx.hasInput(3) ? ctx.input(3).dtype() : DType::Float32;
      visitDeviceFloat(x.dtype(), "LayerNormalizationGrad", [&](auto tag) {
        using T = decltype(tag);
        if (stash == DType::Float64) {
          layerNormGradAs<T, double>(ctx, axis, epsilon);
        } else {
          layerNormGradAs<T, float>(ctx, axis, epsilon);
        }
      });
    });
  });
}

}  // namespace

}  // namespace reduce

void registerReductionGradKernels(OpRegistry& registry) {
  registerSoftmaxGradKernels(registry);
  reduce::registerLayerNormGrad(registry);
  registerLossGradKernels(registry);
}

}  // namespace strata::cuda
