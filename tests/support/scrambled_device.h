#pragma once
// A device for tests without a GPU: host memory that holds every byte XOR-ed with a mask. Host code that reads such
// memory directly sees scrambled values, so correct results show that every access went through the device
// backend's copies (GlooStagingTest, FakeDeviceTrainingTest).

#include <cstddef>
#include <cstdlib>

#include "strata/allocator.h"
#include "strata/device.h"

namespace strata::testing {

// dst[i] = src[i] ^ mask: scrambles host bytes on their way to the device and unscrambles them on the way back.
inline void scrambledCopy(void* dst, const void* src, std::size_t bytes, unsigned char mask) {
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  for (std::size_t i = 0; i < bytes; ++i) {
    out[i] = static_cast<unsigned char>(in[i] ^ mask);
  }
}

// Host memory standing for `device`'s, with the allocator's exact accounting.
class ScrambledDeviceAllocator final : public Allocator {
 public:
  explicit ScrambledDeviceAllocator(Device device) : device_(device) {}
  void* allocate(std::size_t bytes, MemoryCategory category) override {
    stats_.onAllocate(category, bytes);
    return bytes == 0 ? nullptr : std::malloc(bytes);
  }
  void deallocate(void* ptr, std::size_t bytes, MemoryCategory category) override {
    stats_.onFree(category, bytes);
    std::free(ptr);
  }
  Device device() const override { return device_; }

 private:
  Device device_;
};

}  // namespace strata::testing
