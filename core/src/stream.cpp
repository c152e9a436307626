#include "strata/stream.h"

#include <map>
#include <mutex>

#include "strata/error.h"

namespace strata {
namespace {

class CpuStream final : public Stream {
 public:
  Device device() const override { return Device::cpu(); }
  void synchronize() override {}
};

std::mutex& streamsMutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<std::pair<DeviceType, int>, Stream*>& streams() {
  static std::map<std::pair<DeviceType, int>, Stream*> registry;
  return registry;
}

}  // namespace

std::unique_ptr<RecordedWork> Stream::record(const std::function<void()>& /*work*/, std::string* whyNot) {
  *whyNot = fmt::format("{} runs work as it is enqueued, so there is nothing to record", device().toString());
  return nullptr;
}

Stream& defaultStream(Device device) {
  if (device.type == DeviceType::CPU) {
    static CpuStream cpu;
    return cpu;
  }
  std::lock_guard lock(streamsMutex());
  auto it = streams().find({device.type, device.index});
  if (it == streams().end()) {
    fail("no stream for device {}: its backend is not initialised", device.toString());
  }
  return *it->second;
}

void registerDefaultStream(Device device, Stream* stream) {
  std::lock_guard lock(streamsMutex());
  streams()[{device.type, device.index}] = stream;
}

}  // namespace strata
