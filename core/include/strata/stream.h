#pragma once

#include "strata/device.h"

namespace strata {

// An ordered queue of device work. Kernels enqueue on a stream; host code reads results only after synchronize().
// The CPU stream runs work as it is enqueued, so its synchronize() returns at once; the CUDA backend wraps
// cudaStream_t behind the same interface.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual Device device() const = 0;
  virtual void synchronize() = 0;
};

// The default stream of a device (the CPU one always exists; CUDA ones are registered by that backend).
Stream& defaultStream(Device device);
void registerDefaultStream(Device device, Stream* stream);

}  // namespace strata
