#include "strata/allocator.h"

#include <map>
#include <mutex>

#include "cpu_allocator.h"
#include "strata/error.h"
#include "strata/host_memory.h"

namespace strata {
namespace {

std::mutex& registryMutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<std::pair<DeviceType, int>, Allocator*>& registry() {
  // Leaked on purpose, like the CPU allocator below: a device tensor in a static object may be freed after the
  // static destructors ran, and the registered allocators (never deleted) stay reachable for LeakSanitizer.
  static auto* allocators = new std::map<std::pair<DeviceType, int>, Allocator*>();
  return *allocators;
}

}  // namespace

std::string Device::toString() const {
  return type == DeviceType::CPU ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Allocator& allocatorFor(Device device) {
  if (device.type == DeviceType::CPU) {
    // Leaked on purpose: tensors in static objects may be freed after any static destructor would have run.
    static auto* cpu = new CpuAllocator();
    return *cpu;
  }
  std::lock_guard lock(registryMutex());
  auto it = registry().find({device.type, device.index});
  if (it == registry().end()) {
    fail("no allocator for device {}: its backend is not initialised", device.toString());
  }
  return *it->second;
}

void releaseCachedHostMemory() {
  static_cast<CpuAllocator&>(allocatorFor(Device::cpu())).emptyCache();
}

void registerAllocator(Device device, Allocator* allocator) {
  std::lock_guard lock(registryMutex());
  registry()[{device.type, device.index}] = allocator;
}

}  // namespace strata
