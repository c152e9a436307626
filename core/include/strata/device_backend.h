#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "strata/device.h"
#include "strata/dtype.h"

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
  // dst = src (or dst += src) over `count` elements of floating dtypes on `device` (Tensor::convertFrom). The
  // default stages both through host memory and converts there: correct on any backend, not fast.
  virtual void convert(void* dst, DType dstType, const void* src, DType srcType, std::int64_t count, bool accumulate,
                       Device device);

  // A point in a device's compute stream: the work queued there when it was taken.
  class StreamMark {
   public:
    virtual ~StreamMark() = default;
  };
  // Marks the device's compute stream now (on the thread that queued the work); nullptr when copies need no mark.
  virtual std::shared_ptr<StreamMark> markComputeStream(Device /*device*/) { return nullptr; }
  // A copy between host and device memory made from another thread (host staging of collectives): it waits for
  // the compute-stream work before `after` (for none, when null: the caller knows nothing queued there touches
  // these bytes), not for kernels queued after the mark, and it is complete on return in both directions. The
  // default, copy(), suits backends whose copies are synchronous.
  virtual void stagingCopy(const StreamMark* /*after*/, void* dst, Device dstDevice, const void* src, Device srcDevice,
                           std::size_t bytes) {
    copy(dst, dstDevice, src, srcDevice, bytes);
  }
};

// nullptr when no backend for that device type is initialised.
DeviceBackend* deviceBackend(DeviceType type);
void registerDeviceBackend(DeviceType type, DeviceBackend* backend);

}  // namespace strata
