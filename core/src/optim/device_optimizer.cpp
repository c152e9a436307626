#include "strata/optim/device_optimizer.h"

#include <array>
#include <atomic>

namespace strata {
namespace {

std::array<std::atomic<DeviceOptimizerKernels*>, 2>& registry() {
  static std::array<std::atomic<DeviceOptimizerKernels*>, 2> kernels{};
  return kernels;
}

}  // namespace

DeviceOptimizerKernels* deviceOptimizerKernels(DeviceType type) {
  return registry()[static_cast<std::size_t>(type)].load(std::memory_order_acquire);
}

void registerDeviceOptimizerKernels(DeviceType type, DeviceOptimizerKernels* kernels) {
  registry()[static_cast<std::size_t>(type)].store(kernels, std::memory_order_release);
}

}  // namespace strata
