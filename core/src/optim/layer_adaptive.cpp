// Note [Layer-wise trust ratios]: large-batch optimizers scale each layer's step by the ratio of the layer's weight
// norm to its update's norm, so no layer moves further, relative to its size, than the others.
//
// LARS (You, Gitman and Ginsburg, 2017), as timm's and NVIDIA's implementations write it: d = g + wd w, then
// d *= eta ||w|| / ||d|| (1 when either norm is zero), then PyTorch's SGD momentum on d: b = m b + (1 - dampening) d,
// w -= lr b (Nesterov: w -= lr (d + m b)).
// LAMB (You et al., 2019), as NVIDIA's FusedLAMB with bias correction: m = b1 m + (1 - b1) g,
// v = b2 v + (1 - b2) g^2, u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd w, w -= lr (||w|| / ||u||) u.
// Both leave biases and normalisation parameters (fewer than two dimensions) out of the adaptation and the weight
// decay, as the papers do: they take the plain SGD-with-momentum or Adam step.
//
// Each layer takes two passes over its elements (its norms, then its update): the layers are where the ratios
// change, so the loops run per layer, each split over the thread pool.
#include "layer_adaptive.h"

#include <array>
#include <cmath>
#include <mutex>

#include "strata/error.h"
#include "strata/thread_pool.h"

namespace strata {
namespace {

constexpr std::int64_t kGrain = 1 << 15;

// Sums f(i) (an array of N doubles) over [0, n), split over the pool.
template <std::size_t N, typename F>
std::array<double, N> sumOver(std::int64_t n, F&& f) {
  std::array<double, N> total{};
  std::mutex mutex;
  parallelFor(0, n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    std::array<double, N> local{};
    for (std::int64_t i = begin; i < end; ++i) {
      const std::array<double, N> term = f(i);
      for (std::size_t k = 0; k < N; ++k) {
        local[k] += term[k];
      }
    }
    const std::lock_guard lock(mutex);
    for (std::size_t k = 0; k < N; ++k) {
      total[k] += local[k];
    }
  });
  return total;
}

template <typename T>
void larsLayer(T* w, const T* g, T* b, std::int64_t n, bool adapted, const OptimizerOptions& o, double lr,
               double gradScale, bool firstStep) {
  const double wd = adapted ? o.weightDecay : 0.0;
  double ratio = 1.0;
  if (adapted) {
    const auto [ww, dd] = sumOver<2>(n, [&](std::int64_t i) {
      const double d = static_cast<double>(g[i]) * gradScale + wd * static_cast<double>(w[i]);
      return std::array<double, 2>{static_cast<double>(w[i]) * static_cast<double>(w[i]), d * d};
    });
    if (ww > 0 && dd > 0) {
      ratio = o.trustCoefficient * std::sqrt(ww) / std::sqrt(dd);
    }
  }
  const auto scale = static_cast<T>(gradScale * ratio);
  const auto decay = static_cast<T>(wd * ratio);
  const auto momentum = static_cast<T>(o.momentum);
  const auto keep = static_cast<T>(1.0 - o.dampening);
  const auto rate = static_cast<T>(lr);
  parallelFor(0, n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      T d = g[i] * scale + decay * w[i];
      if (b != nullptr) {
        const T next = firstStep ? d : momentum * b[i] + keep * d;
        b[i] = next;
        d = o.nesterov ? d + momentum * next : next;
      }
      w[i] -= rate * d;
    }
  });
}

template <typename T>
void lambLayer(T* w, const T* g, T* m, T* v, std::int64_t n, bool adapted, const OptimizerOptions& o, double lr,
               double gradScale, std::int64_t step) {
  const double wd = adapted ? o.weightDecay : 0.0;
  const double correction1 = 1.0 - std::pow(o.beta1, static_cast<double>(step));
  const double correction2 = 1.0 - std::pow(o.beta2, static_cast<double>(step));
  const auto b1 = static_cast<T>(o.beta1);
  const auto b2 = static_cast<T>(o.beta2);
  const auto scale = static_cast<T>(gradScale);
  parallelFor(0, n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const T d = g[i] * scale;
      m[i] = b1 * m[i] + (T(1) - b1) * d;
      v[i] = b2 * v[i] + (T(1) - b2) * d * d;
    }
  });
  // The update, computed the same way in both passes.
  const auto update = [&](std::int64_t i) {
    const double mHat = static_cast<double>(m[i]) / correction1;
    const double vHat = static_cast<double>(v[i]) / correction2;
    return mHat / (std::sqrt(vHat) + o.epsilon) + wd * static_cast<double>(w[i]);
  };
  double ratio = 1.0;
  if (adapted) {
    const auto [ww, uu] = sumOver<2>(n, [&](std::int64_t i) {
      const double u = update(i);
      return std::array<double, 2>{static_cast<double>(w[i]) * static_cast<double>(w[i]), u * u};
    });
    if (ww > 0 && uu > 0) {
      ratio = std::sqrt(ww) / std::sqrt(uu);
    }
  }
  const double rate = lr * ratio;
  parallelFor(0, n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      w[i] = static_cast<T>(static_cast<double>(w[i]) - rate * update(i));
    }
  });
}

}  // namespace

void layerAdaptiveUpdate(const ParameterSlice& slice, const std::vector<LayerSpan>& layers,
                         const OptimizerOptions& options, const Tensor& first, const Tensor& second, double lr,
                         double gradScale, std::int64_t step) {
  const Tensor& param = slice.parameters;
  const auto run = [&]<typename T>() {
    T* w = param.data<T>();
    const T* g = slice.gradients.data<T>();
    for (const LayerSpan& layer : layers) {
      if (options.kind == OptimizerKind::Lars) {
        T* b = first.defined() ? first.data<T>() + layer.offset : nullptr;
        larsLayer(w + layer.offset, g + layer.offset, b, layer.numel, layer.adapted, options, lr, gradScale, step == 1);
      } else {
        lambLayer(w + layer.offset, g + layer.offset, first.data<T>() + layer.offset, second.data<T>() + layer.offset,
                  layer.numel, layer.adapted, options, lr, gradScale, step);
      }
    }
  };
  if (param.dtype() == DType::Float32) {
    run.template operator()<float>();
  } else if (param.dtype() == DType::Float64) {
    run.template operator()<double>();
  } else {
    fail("optimizers update float32 and float64 parameters, not {}", dtypeName(param.dtype()));
  }
}

}  // namespace strata
