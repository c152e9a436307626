#pragma once

#include <string>

#include "strata/device.h"

namespace strata::testing {

// Note [Test device]: one test suite, both backends. STRATA_TEST_DEVICE=cuda makes the conformance runner and the
// gradient-rule checks run their plans on the GPU as well and compare with the CPU backend (ctest registers those
// instances with the `gpu` label). Without a GPU, or in a build without the CUDA backend, they skip and say why.
struct TestDevice {
  Device device = Device::cpu();
  std::string skipReason;  // non-empty: the requested device cannot be used here
};

// The device from STRATA_TEST_DEVICE (cpu when unset), initialised; TF32 is off so float32 results are compared
// at float32 precision.
const TestDevice& testDevice();

}  // namespace strata::testing
