#include "support/test_device.h"

#include <cstdlib>

#include <gtest/gtest.h>

#include "strata/error.h"
#ifdef STRATA_HAS_CUDA
#include "strata/cuda/backend.h"
#endif

namespace strata::testing {
namespace {

TestDevice resolve() {
  const char* env = std::getenv("STRATA_TEST_DEVICE");
  const std::string requested = env != nullptr ? env : "cpu";
  if (requested.empty() || requested == "cpu") {
    return {};
  }
  if (requested != "cuda") {
    return {Device::cpu(), "STRATA_TEST_DEVICE=" + requested + " is not a device (cpu or cuda)"};
  }
#ifdef STRATA_HAS_CUDA
  const cuda::DeviceProbe probe = cuda::probeDevices();
  if (probe.count == 0) {
    return {Device::cpu(), "no CUDA device: " + probe.whyNone};
  }
  try {
    cuda::setTf32(false);
    cuda::initializeDevice(0);
  } catch (const Error& e) {
    return {Device::cpu(), std::string("CUDA device 0 is not usable: ") + e.what()};
  }
  return {Device::cuda(0), ""};
#else
  return {Device::cpu(), "this build has no CUDA backend (STRATA_CUDA=OFF)"};
#endif
}

// With STRATA_TEST_DEVICE naming a device this machine cannot use, every test of the binary is skipped with the
// reason (the gpu.* instances on a machine without a GPU), rather than passing on the CPU under a gpu name.
class SkipWithoutTestDevice final : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!testDevice().skipReason.empty()) {
      GTEST_SKIP() << testDevice().skipReason;
    }
  }
};

[[maybe_unused]] const ::testing::Environment* const kSkipEnvironment =
    ::testing::AddGlobalTestEnvironment(new SkipWithoutTestDevice);

}  // namespace

const TestDevice& testDevice() {
  static const TestDevice device = resolve();
  return device;
}

}  // namespace strata::testing
