#pragma once

#include <string>

namespace strata::cuda {

// What the machine offers. Never throws: a machine without a driver or a GPU reports count 0 and says why.
struct DeviceProbe {
  int count = 0;
  std::string whyNone;  // empty when count > 0
};
DeviceProbe probeDevices();

// Makes cuda:<index> usable: its caching allocator, default stream, library handles, the device copy backend,
// the CUDA kernels in the op registry and the device optimizer kernels. Idempotent per device. Throws
// strata::Error with the reason when the device cannot be used.
void initializeDevice(int index);

// Registers every CUDA kernel (native and host-staging fallback) in the op registry. Needs no device; idempotent.
void registerCudaKernels();

// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)".
std::string describeDevice(int index);
// The device's PCI bus id ("0000:3B:00.0"): the same GPU has the same id in every process, whatever
// CUDA_VISIBLE_DEVICES numbered it.
std::string pciBusId(int index);

// Precision knobs (see cuda_context.h): TF32 for float32 convolutions and GEMMs.
void setTf32(bool enabled);

// The op types that run through host staging on this backend (no native CUDA kernel), sorted.
std::string hostFallbackOps();

}  // namespace strata::cuda
