#include "trainer_context.h"

#include <cstring>

#include "strata/optim/device_optimizer.h"
#include "strata/thread_pool.h"

namespace strata::cli {
namespace {

template <typename Fn>
void forFloat(const Tensor& t, Fn&& fn) {
  if (t.dtype() == DType::Float64) {
    fn(double{});
  } else {
    fn(float{});
  }
}

// Gradients on a GPU are accumulated by the kernels its backend registered for the optimizer.
DeviceOptimizerKernels& deviceKernels(const Tensor& grad) {
  DeviceOptimizerKernels* kernels = deviceOptimizerKernels(grad.device().type);
  STRATA_CHECK(kernels != nullptr, "gradient accumulation on {}: its backend registered no kernels",
               grad.device().toString());
  return *kernels;
}

}  // namespace

GradientAccumulator::GradientAccumulator(TrainingPlan& plan, int microBatches)
    : plan_(plan), microBatches_(microBatches) {
  if (microBatches_ <= 1) {
    return;
  }
  ParameterStore& store = plan.parameters();
  for (std::size_t g = 0; g < store.groupCount(); ++g) {
    const Tensor& grad = store.flatGradients(g);
    sums_.push_back(Tensor::zeros(grad.dtype(), grad.shape(), MemoryCategory::Gradients, grad.device()));
  }
  hook_ = plan.executor().addGradientReadyHook([this](int parameter) { onGradientReady(parameter); });
}

GradientAccumulator::~GradientAccumulator() {
  if (hook_ >= 0) {
    plan_.executor().removeHook(hook_);
  }
}

void GradientAccumulator::accumulate() {
  ParameterStore& store = plan_.parameters();
  for (std::size_t g = 0; g < store.groupCount(); ++g) {
    const Tensor& grad = store.flatGradients(g);
    Tensor& sum = sums_[g];
    if (grad.device().type != DeviceType::CPU) {
      deviceKernels(grad).accumulate(sum, grad, micro_ == 0);
      continue;
    }
    forFloat(grad, [&](auto tag) {
      using T = decltype(tag);
      const T* src = grad.data<T>();
      T* dst = sum.data<T>();
      const bool first = micro_ == 0;
      parallelFor(0, grad.numel(), 1 << 15, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) {
          dst[i] = first ? src[i] : dst[i] + src[i];
        }
      });
    });
  }
}

void GradientAccumulator::onGradientReady(int parameter) {
  if (micro_ != microBatches_ - 1) {
    return;
  }
  const Tensor grad = plan_.parameters().gradient(static_cast<std::size_t>(parameter));
  const ParameterInfo& info = plan_.parameters().info(static_cast<std::size_t>(parameter));
  const Tensor sum = sums_[info.group].viewAs(info.offset, info.meta);
  if (grad.device().type != DeviceType::CPU) {
    deviceKernels(grad).finishAccumulation(grad, sum, 1.0 / microBatches_);
    return;
  }
  forFloat(grad, [&](auto tag) {
    using T = decltype(tag);
    T* g = grad.data<T>();
    const T* s = sum.data<T>();
    const T scale = T(1) / static_cast<T>(microBatches_);
    for (std::int64_t i = 0; i < grad.numel(); ++i) {
      g[i] = (g[i] + s[i]) * scale;
    }
  });
}

}  // namespace strata::cli
