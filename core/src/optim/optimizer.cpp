#include "strata/optim/optimizer.h"

#include <cmath>
#include <mutex>
#include <utility>

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

void deviceUpdate(const ParameterSlice& slice, const OptimizerOptions& o, const Tensor& first, const Tensor& second,
                  double lr, double gradScale, std::int64_t step) {
  DeviceOptimizerKernels& kernels = kernelsFor(slice.parameters);
  if (o.kind == OptimizerKind::Sgd) {
    const SgdStepScalars scalars{.lr = lr,
                                 .gradScale = gradScale,
                                 .weightDecay = o.weightDecay,
                                 .momentum = o.momentum,
                                 .dampening = o.dampening,
                                 .nesterov = o.nesterov,
                                 .firstStep = step == 1};
    kernels.sgd(slice.parameters, slice.gradients, first, scalars);
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
    kernels.adam(slice.parameters, slice.gradients, first, second, scalars);
  }
}

std::vector<ParameterSlice> flatBuffersOf(const ParameterStore& store) {
  std::vector<ParameterSlice> slices;
  for (std::size_t g = 0; g < store.groupCount(); ++g) {
    slices.push_back(ParameterSlice{store.flatParameters(g), store.flatGradients(g)});
  }
  return slices;
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

std::size_t optimizerStatesPerSlice(const OptimizerOptions& options) {
  if (options.kind == OptimizerKind::Sgd) {
    return options.momentum != 0.0 ? 1 : 0;
  }
  return 2;
}

Optimizer::Optimizer(ParameterStore& store, const OptimizerOptions& options)
    : Optimizer(flatBuffersOf(store), options) {}

Optimizer::Optimizer(std::vector<ParameterSlice> slices, const OptimizerOptions& options)
    : slices_(std::move(slices)), options_(options) {
  for (std::size_t s = 0; s < slices_.size(); ++s) {
    const Tensor& p = slices_[s].parameters;
    const Tensor& g = slices_[s].gradients;
    STRATA_CHECK(p.defined() && g.defined(), "optimizer slice {}: parameters or gradients are missing", s);
    STRATA_CHECK(p.numel() == g.numel() && p.dtype() == g.dtype() && p.device() == g.device(),
                 "optimizer slice {}: parameters ({} {} on {}) and gradients ({} {} on {}) differ", s, p.numel(),
                 dtypeName(p.dtype()), p.device().toString(), g.numel(), dtypeName(g.dtype()), g.device().toString());
  }
  for (std::size_t k = 0; k < optimizerStatesPerSlice(options); ++k) {
    for (const ParameterSlice& slice : slices_) {
      const Tensor& p = slice.parameters;
      state_.push_back(Tensor::zeros(p.dtype(), {p.numel()}, MemoryCategory::OptimizerState, p.device()));
    }
  }
}

double Optimizer::gradNorm() const {
  double total = 0;
  std::mutex mutex;
  for (const ParameterSlice& slice : slices_) {
    const Tensor& grad = slice.gradients;
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
  return std::sqrt(sumOverRanks_ ? sumOverRanks_(total) : total);
}

void Optimizer::update(std::size_t s, double lr, double gradScale) {
  const Tensor& param = slices_[s].parameters;
  const Tensor& grad = slices_[s].gradients;
  const std::size_t n = slices_.size();
  const Tensor first = state_.size() > s ? state_[s] : Tensor();
  const Tensor second = state_.size() > n + s ? state_[n + s] : Tensor();
  if (param.device().type != DeviceType::CPU) {
    deviceUpdate(slices_[s], options_, first, second, lr, gradScale, steps_);
    return;
  }
  forFloatGroup(param, [&](auto tag) {
    using T = decltype(tag);
    if (options_.kind == OptimizerKind::Sgd) {
      T* buf = first.defined() ? first.data<T>() : nullptr;
      sgdUpdate(param.data<T>(), grad.data<T>(), buf, param.numel(), options_, lr, gradScale, steps_ == 1);
    } else {
      adamUpdate(param.data<T>(), grad.data<T>(), first.data<T>(), second.data<T>(), param.numel(), options_, lr,
                 gradScale, steps_);
    }
  });
}

double Optimizer::step(double lr) {
  const double lossScale = scaler_ != nullptr ? scaler_->scale() : 1.0;
  const double norm = options_.maxGradNorm > 0 || scaler_ != nullptr ? gradNorm() / lossScale : 0.0;
  lastStepSkipped_ = scaler_ != nullptr && !scaler_->update(std::isfinite(norm));
  if (lastStepSkipped_) {
    return norm;
  }
  ++steps_;
  // PyTorch's clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below one.
  const double clip =
      options_.maxGradNorm > 0 && norm > options_.maxGradNorm ? options_.maxGradNorm / (norm + 1e-6) : 1.0;
  for (std::size_t s = 0; s < slices_.size(); ++s) {
    update(s, lr, clip / lossScale);
  }
  for (const ParameterSlice& slice : slices_) {
    slice.parameters.storage()->bumpVersion();
  }
  return norm;
}

}  // namespace strata
