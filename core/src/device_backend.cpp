#include "strata/device_backend.h"

#include <array>
#include <atomic>

namespace strata {
namespace {

std::array<std::atomic<DeviceBackend*>, 2>& backends() {
  static std::array<std::atomic<DeviceBackend*>, 2> registry{};
  return registry;
}

}  // namespace

DeviceBackend* deviceBackend(DeviceType type) {
  return backends()[static_cast<std::size_t>(type)].load(std::memory_order_acquire);
}

void registerDeviceBackend(DeviceType type, DeviceBackend* backend) {
  backends()[static_cast<std::size_t>(type)].store(backend, std::memory_order_release);
}

}  // namespace strata
