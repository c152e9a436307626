#include "strata/optim/optimizer.h"

#include <cmath>
#include <mutex>

#include "strata/error.h"
#include "strata/optim/device_optimizer.h"
#include "strata/thread_pool.h"

namespace strata {
namespace {

constexpr std::int64_t kGrain = 1 << 15;

template <typename T>
void sgdUpdate(T* p, T* g, T* buf, std::int64_t n, const OptimizerOptions& o, double lr, double gradScale,
               bool firstStep) {
  parallelFor(0, n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    const T wd = static_cast<T>(o.weightDecay);
    const T mom = static_cast<T>(o.momentum);
    const T damp = static_cast<T>(1.0 - o.dampening);
    const T rate = static_cast<T>(lr);
    const T scale = static_cast<T>(gradScale);
    for (std::int64_t i = begin; i < end; ++i) {
      T d = g[i] * scale + wd * p[i];
      if (buf != nullptr) {
        buf[i] = firstStep ? d : mom * buf[i] + damp * d;
        d = o.nesterov ? d + mom * buf[i] : buf[i];
      }
      p[i] -= rate * d;
    }
  });
}

template <typename T>
void adamUpdate(T* p, T* g, T* m, T* v, std::int64_t n, const OptimizerOptions& o, double lr, double gradScale,
                std::int64_t step) {
  const double correction1 = 1.0 - std::pow(o.beta1, static_cast<double>(step));
  const double correction2 = 1.0 - std::pow(o.beta2, static_cast<double>(step));
  const bool decoupled = o.kind == OptimizerKind::AdamW;
  parallelFor(0, n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    const T b1 = static_cast<T>(o.beta1);
    const T b2 = static_cast<T>(o.beta2);
    const T wd = static_cast<T>(o.weightDecay);
    const T stepSize = static_cast<T>(lr / correction1);
    const T sqrtCorrection2 = static_cast<T>(std::sqrt(correction2));
    const T eps = static_cast<T>(o.epsilon);
    const T decay = static_cast<T>(1.0 - lr * o.weightDecay);
    const T scale = static_cast<T>(gradScale);
    for (std::int64_t i = begin; i < end; ++i) {
      T d = g[i] * scale;
      if (decoupled) {
        p[i] *= decay;
      } else {
        d += wd * p[i];
      }
      m[i] = b1 * m[i] + (T(1) - b1) * d;
      v[i] = b2 * v[i] + (T(1) - b2) * d * d;
      p[i] -= stepSize * m[i] / (std::sqrt(v[i]) / sqrtCorrection2 + eps);
    }
  });
}

template <typename Fn>
void forFloatGroup(const Tensor& t, Fn&& fn) {
  if (t.dtype() == DType::Float32) {
    fn(float{});
  } else if (t.dtype() == DType::Float64) {
    fn(double{});
  } else {
    fail("optimizers update float32 and float64 parameters, not {}", dtypeName(t.dtype()));
  }
}

// Flat buffers off the CPU are updated by the kernels their backend registered (same rules, same scalars).
DeviceOptimizerKernels& kernelsFor(const Tensor& t) {
  DeviceOptimizerKernels* kernels = deviceOptimizerKernels(t.device().type);
  STRATA_CHECK(kernels != nullptr,
               "the optimizer cannot update parameters on {}: no optimizer kernels are registered for that device "
               "(its backend is not initialised)",
               t.device().toString());
  return *kernels;
}

void deviceUpdate(const ParameterStore& store, const OptimizerOptions& o, const std::vector<Tensor>& state,
                  std::size_t g, double lr, double gradScale, std::int64_t step) {
  const Tensor& param = store.flatParameters(g);
  const Tensor& grad = store.flatGradients(g);
  DeviceOptimizerKernels& kernels = kernelsFor(param);
  if (o.kind == OptimizerKind::Sgd) {
    const SgdStepScalars scalars{.lr = lr,
                                 .gradScale = gradScale,
                                 .weightDecay = o.weightDecay,
                                 .momentum = o.momentum,
                                 .dampening = o.dampening,
                                 .nesterov = o.nesterov,
                                 .firstStep = step == 1};
    kernels.sgd(param, grad, state.empty() ? Tensor() : state[g], scalars);
  } else {
    const AdamStepScalars scalars{.lr = lr,
                                  .gradScale = gradScale,
                                  .beta1 = o.beta1,
                                  .beta2 = o.beta2,
                                  .epsilon = o.epsilon,
                                  .weightDecay = o.weightDecay,
                                  .correction1 = 1.0 - std::pow(o.beta1, static_cast<double>(step)),
                                  .correction2 = 1.0 - std::pow(o.beta2, static_cast<double>(step)),
                                  .decoupled = o.kind == OptimizerKind::AdamW};
    kernels.adam(param, grad, state[g], state[store.groupCount() + g], scalars);
  }
}

}  // namespace

OptimizerKind parseOptimizerKind(const std::string& name) {
  if (name == "sgd")
    return OptimizerKind::Sgd;
  if (name == "adam")
    return OptimizerKind::Adam;
  if (name == "adamw")
    return OptimizerKind::AdamW;
  fail("unknown optimizer '{}' (choose sgd, adam or adamw)", name);
}

Optimizer::Optimizer(ParameterStore& store, const OptimizerOptions& options) : store_(store), options_(options) {
  const std::size_t buffersPerGroup = options.kind == OptimizerKind::Sgd ? (options.momentum != 0.0 ? 1 : 0) : 2;
  for (std::size_t k = 0; k < buffersPerGroup; ++k) {
    for (std::size_t g = 0; g < store.groupCount(); ++g) {
      const Tensor& flat = store.flatParameters(g);
      state_.push_back(Tensor::zeros(flat.dtype(), flat.shape(), MemoryCategory::OptimizerState, flat.device()));
    }
  }
}

double Optimizer::globalGradNorm() const {
  double total = 0;
  std::mutex mutex;
  for (std::size_t g = 0; g < store_.groupCount(); ++g) {
    const Tensor& grad = store_.flatGradients(g);
    if (grad.device().type != DeviceType::CPU) {
      total += kernelsFor(grad).sumOfSquares(grad);
      continue;
    }
    forFloatGroup(grad, [&](auto tag) {
      using T = decltype(tag);
      const T* data = grad.data<T>();
      parallelFor(0, grad.numel(), kGrain, [&](std::int64_t begin, std::int64_t end) {
        double local = 0;
        for (std::int64_t i = begin; i < end; ++i) {
          local += static_cast<double>(data[i]) * static_cast<double>(data[i]);
        }
        std::lock_guard lock(mutex);
        total += local;
      });
    });
  }
  return std::sqrt(total);
}

double Optimizer::step(double lr) {
  const double lossScale = scaler_ != nullptr ? scaler_->scale() : 1.0;
  const double norm = options_.maxGradNorm > 0 || scaler_ != nullptr ? globalGradNorm() / lossScale : 0.0;
  lastStepSkipped_ = scaler_ != nullptr && !scaler_->update(std::isfinite(norm));
  if (lastStepSkipped_) {
    return norm;
  }
  ++steps_;
  // PyTorch's clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below one.
  const double clip =
      options_.maxGradNorm > 0 && norm > options_.maxGradNorm ? options_.maxGradNorm / (norm + 1e-6) : 1.0;
  const double scale = clip / lossScale;
  const std::size_t groups = store_.groupCount();
  for (std::size_t g = 0; g < groups; ++g) {
    const Tensor& param = store_.flatParameters(g);
    const Tensor& grad = store_.flatGradients(g);
    if (param.device().type != DeviceType::CPU) {
      deviceUpdate(store_, options_, state_, g, lr, scale, steps_);
      continue;
    }
    forFloatGroup(param, [&](auto tag) {
      using T = decltype(tag);
      if (options_.kind == OptimizerKind::Sgd) {
        T* buf = state_.empty() ? nullptr : state_[g].data<T>();
        sgdUpdate(param.data<T>(), grad.data<T>(), buf, param.numel(), options_, lr, scale, steps_ == 1);
      } else {
        adamUpdate(param.data<T>(), grad.data<T>(), state_[g].data<T>(), state_[groups + g].data<T>(), param.numel(),
                   options_, lr, scale, steps_);
      }
    });
  }
  store_.bumpVersion();
  return norm;
}

}  // namespace strata
