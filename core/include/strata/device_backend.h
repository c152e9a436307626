#pragma once

#include <cstddef>

#include "strata/device.h"

namespace strata {

// The memory operations a non-CPU backend lends to core: copies between host and device memory and fills.
// Core (Tensor::copyFrom, Tensor::to, process groups that stage through the host) reaches the CUDA backend only
// through this interface, so strata_core never links CUDA.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  // Copies `bytes` from src to dst; either side may be host memory. Ordered on the device's default stream and
  // complete on return when dst is host memory (so the host may read it at once).
  virtual void copy(void* dst, Device dstDevice, const void* src, Device srcDevice, std::size_t bytes) = 0;
  virtual void fillZero(void* dst, Device device, std::size_t bytes) = 0;
};

// nullptr when no backend for that device type is initialised.
DeviceBackend* deviceBackend(DeviceType type);
void registerDeviceBackend(DeviceType type, DeviceBackend* backend);

}  // namespace strata
