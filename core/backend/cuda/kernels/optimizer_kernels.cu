// The optimizer's fused update loops for flat buffers on a CUDA device. Each kernel mirrors the CPU loop in
// core/src/optim/optimizer.cpp rule for rule: the same scalars cast to the same type, the same order of operations.
// float and double compute in their own type (as on the CPU); float16 and bfloat16 compute in float and round every
// stored value (parameter and state) to the parameter's dtype, as PyTorch does for 16-bit parameters.

#include <algorithm>
#include <cmath>

#include "kernel_utils.cuh"
#include "optimizer_kernels.h"
#include "strata/optim/device_optimizer.h"

namespace strata::cuda {
namespace {

constexpr int kReduceThreads = 256;  // a power of two: the block reductions halve it
constexpr unsigned kMaxReduceBlocks = 1024;

template <typename T>
using Acc = typename AccTypeOf<T>::type;

__device__ inline float deviceSqrt(float x) {
  return sqrtf(x);
}
__device__ inline double deviceSqrt(double x) {
  return sqrt(x);
}

// Sums shared[0, blockDim.x) into shared[0]; blockDim.x must be kReduceThreads.
__device__ inline void blockSum(double* shared) {
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      shared[threadIdx.x] += shared[threadIdx.x + s];
    }
    __syncthreads();
  }
}

template <typename T>
__global__ void sumOfSquaresPartialKernel(const T* x, std::int64_t n, double* partial) {
  __shared__ double shared[kReduceThreads];
  double local = 0;
  STRATA_GRID_STRIDE_LOOP(i, n) {
    const double v = static_cast<double>(toAcc(x[i]));
    local += v * v;
  }
  shared[threadIdx.x] = local;
  blockSum(shared);
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = shared[0];
  }
}

__global__ void sumPartialsKernel(const double* partial, unsigned count, double* out) {
  __shared__ double shared[kReduceThreads];
  double local = 0;
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) {
    local += partial[i];
  }
  shared[threadIdx.x] = local;
  blockSum(shared);
  if (threadIdx.x == 0) {
    *out = shared[0];
  }
}

// The CPU loop's scalars, cast to the arithmetic type A on the host exactly as the CPU loop casts them to T.
template <typename A>
struct SgdArgs {
  A weightDecay;
  A momentum;
  A damp;  // 1 - dampening
  A rate;
  A scale;
  bool nesterov;
  bool firstStep;
};

template <typename A>
struct AdamArgs {
  A beta1;
  A beta2;
  A weightDecay;
  A stepSize;  // lr / correction1
  A sqrtCorrection2;
  A eps;
  A decay;  // 1 - lr * weightDecay (AdamW)
  A scale;
  bool decoupled;
};

template <typename T>
__global__ void sgdKernel(T* p, const T* g, T* buf, std::int64_t n, SgdArgs<Acc<T>> a) {
  using A = Acc<T>;
  STRATA_GRID_STRIDE_LOOP(i, n) {
    A d = static_cast<A>(g[i]) * a.scale + a.weightDecay * static_cast<A>(p[i]);
    if (buf != nullptr) {
      buf[i] = static_cast<T>(a.firstStep ? d : a.momentum * static_cast<A>(buf[i]) + a.damp * d);
      d = a.nesterov ? d + a.momentum * static_cast<A>(buf[i]) : static_cast<A>(buf[i]);
    }
    p[i] = static_cast<T>(static_cast<A>(p[i]) - a.rate * d);
  }
}

template <typename T>
__global__ void adamKernel(T* p, const T* g, T* m, T* v, std::int64_t n, AdamArgs<Acc<T>> a) {
  using A = Acc<T>;
  STRATA_GRID_STRIDE_LOOP(i, n) {
    A d = static_cast<A>(g[i]) * a.scale;
    if (a.decoupled) {
      p[i] = static_cast<T>(static_cast<A>(p[i]) * a.decay);
    } else {
      d += a.weightDecay * static_cast<A>(p[i]);
    }
    m[i] = static_cast<T>(a.beta1 * static_cast<A>(m[i]) + (A(1) - a.beta1) * d);
    v[i] = static_cast<T>(a.beta2 * static_cast<A>(v[i]) + (A(1) - a.beta2) * d * d);
    p[i] = static_cast<T>(static_cast<A>(p[i]) - a.stepSize * static_cast<A>(m[i]) /
                                                     (deviceSqrt(static_cast<A>(v[i])) / a.sqrtCorrection2 + a.eps));
  }
}

void checkOnCuda(const Tensor& t, const char* what) {
  STRATA_CHECK(t.defined() && t.device().type == DeviceType::CUDA,
               "CUDA optimizer kernels: the {} is not a tensor on a CUDA device ({})", what,
               t.defined() ? t.device().toString() : std::string("undefined"));
}

void checkMatches(const Tensor& param, const Tensor& other, const char* what) {
  checkOnCuda(other, what);
  STRATA_CHECK(other.dtype() == param.dtype() && other.numel() == param.numel() && other.device() == param.device(),
               "CUDA optimizer kernels: the {} ({}, {} elements on {}) does not match the parameters ({}, {} elements "
               "on {})",
               what, dtypeName(other.dtype()), other.numel(), other.device().toString(), dtypeName(param.dtype()),
               param.numel(), param.device().toString());
}

// The device's compute stream, with that device current (the launches below go to the current device).
cudaStream_t computeStreamOf(const Tensor& t) {
  makeCurrent(t.device().index);
  return defaultCudaStream(t.device().index).handle();
}

class CudaOptimizerKernels final : public DeviceOptimizerKernels {
 public:
  double sumOfSquares(const Tensor& flat) override {
    checkOnCuda(flat, "gradient");
    const std::int64_t n = flat.numel();
    if (n == 0) {
      return 0.0;
    }
    const cudaStream_t stream = computeStreamOf(flat);
    const unsigned blocks = std::min(blocksFor(n, kReduceThreads), kMaxReduceBlocks);
    // partial sums of every block, then their total in the last slot
    Tensor workspace = Tensor::empty(DType::Float64, {static_cast<std::int64_t>(blocks) + 1}, MemoryCategory::Workspace,
                                     flat.device());
    double* partial = workspace.data<double>();
    visitDeviceFloat(flat.dtype(), "the optimizer's gradient norm", [&](auto tag) {
      using T = decltype(tag);
      sumOfSquaresPartialKernel<T><<<blocks, kReduceThreads, 0, stream>>>(flat.data<T>(), n, partial);
      STRATA_CUDA_CHECK_LAUNCH();
    });
    sumPartialsKernel<<<1, kReduceThreads, 0, stream>>>(partial, blocks, partial + blocks);
    STRATA_CUDA_CHECK_LAUNCH();
    double total = 0.0;
    STRATA_CUDA_CHECK(cudaMemcpyAsync(&total, partial + blocks, sizeof(double), cudaMemcpyDeviceToHost, stream));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
    return total;
  }

  void sgd(const Tensor& param, const Tensor& grad, const Tensor& momentum, const SgdStepScalars& s) override {
    checkOnCuda(param, "parameter buffer");
    checkMatches(param, grad, "gradient buffer");
    if (momentum.defined()) {
      checkMatches(param, momentum, "momentum buffer");
    }
    const std::int64_t n = param.numel();
    if (n == 0) {
      return;
    }
    const cudaStream_t stream = computeStreamOf(param);
    visitDeviceFloat(param.dtype(), "the SGD optimizer", [&](auto tag) {
      using T = decltype(tag);
      using A = Acc<T>;
      const SgdArgs<A> args{static_cast<A>(s.weightDecay),
                            static_cast<A>(s.momentum),
                            static_cast<A>(1.0 - s.dampening),
                            static_cast<A>(s.lr),
                            static_cast<A>(s.gradScale),
                            s.nesterov,
                            s.firstStep};
      T* buf = momentum.defined() ? momentum.data<T>() : nullptr;
      sgdKernel<T><<<blocksFor(n), kThreadsPerBlock, 0, stream>>>(param.data<T>(), grad.data<T>(), buf, n, args);
      STRATA_CUDA_CHECK_LAUNCH();
    });
  }

  void adam(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
            const AdamStepScalars& s) override {
    checkOnCuda(param, "parameter buffer");
    checkMatches(param, grad, "gradient buffer");
    checkMatches(param, m, "first-moment buffer");
    checkMatches(param, v, "second-moment buffer");
    const std::int64_t n = param.numel();
    if (n == 0) {
      return;
    }
    const cudaStream_t stream = computeStreamOf(param);
    visitDeviceFloat(param.dtype(), "the Adam optimizer", [&](auto tag) {
      using T = decltype(tag);
      using A = Acc<T>;
      const AdamArgs<A> args{static_cast<A>(s.beta1),
                             static_cast<A>(s.beta2),
                             static_cast<A>(s.weightDecay),
                             static_cast<A>(s.lr / s.correction1),
                             static_cast<A>(std::sqrt(s.correction2)),
                             static_cast<A>(s.epsilon),
                             static_cast<A>(1.0 - s.lr * s.weightDecay),
                             static_cast<A>(s.gradScale),
                             s.decoupled};
      adamKernel<T><<<blocksFor(n), kThreadsPerBlock, 0, stream>>>(param.data<T>(), grad.data<T>(), m.data<T>(),
                                                                   v.data<T>(), n, args);
      STRATA_CUDA_CHECK_LAUNCH();
    });
  }
};

}  // namespace

void registerCudaOptimizerKernels() {
  // Leaked on purpose, like the device backend: optimizers may run during static destruction.
  static auto* kernels = new CudaOptimizerKernels();
  registerDeviceOptimizerKernels(DeviceType::CUDA, kernels);
}

}  // namespace strata::cuda
