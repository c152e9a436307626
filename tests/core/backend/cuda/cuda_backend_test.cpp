// The CUDA backend's host-side contracts, checked on any machine (no GPU needed): every op has a CUDA kernel,
// the hot ops are native, and a machine without a GPU gets explanations instead of crashes.

#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "strata/cuda/backend.h"
#include "strata/cuda/gpu_monitor.h"
#include "strata/error.h"
#include "strata/op_registry.h"

namespace strata::cuda {
namespace {

std::set<std::string> fallbackSet() {
  std::set<std::string> ops;
  std::stringstream list(hostFallbackOps());
  std::string item;
  while (std::getline(list, item, ',')) {
    ops.insert(item.substr(item.find_first_not_of(' ')));
  }
  return ops;
}

TEST(CudaBackendTest, EveryCpuOpHasACudaKernel) {
  registerCudaKernels();
  const OpRegistry& registry = OpRegistry::instance();
  for (const std::string& type : registry.opTypes()) {
    if (registry.supports(type, DeviceType::CPU)) {
      EXPECT_TRUE(registry.supports(type, DeviceType::CUDA)) << type;
    }
  }
}

TEST(CudaBackendTest, PaperModelOpsRunNatively) {
  registerCudaKernels();
  const std::set<std::string> fallback = fallbackSet();
  // Forward and backward ops of the five study models and the bundled CNN: none may go through host staging.
  for (const char* op : {"Conv",
                         "ConvGradInput",
                         "ConvGradWeight",
                         "BatchNormalization",
                         "BatchNormalizationGrad",
                         "MaxPool",
                         "MaxPoolGrad",
                         "AveragePool",
                         "AveragePoolGrad",
                         "GlobalAveragePool",
                         "Relu",
                         "ReluGrad",
                         "Sigmoid",
                         "SigmoidGrad",
                         "Add",
                         "Sub",
                         "Mul",
                         "Div",
                         "Gemm",
                         "MatMul",
                         "Reshape",
                         "Flatten",
                         "Concat",
                         "Split",
                         "Transpose",
                         "Slice",
                         "SliceGrad",
                         "Softmax",
                         "SoftmaxCrossEntropyLoss",
                         "LayerNormalization",
                         "LayerNormalizationGrad",
                         "Erf",
                         "ErfGrad",
                         "Dropout",
                         "DropoutGrad",
                         "ReduceSum",
                         "ReduceMean",
                         "Identity",
                         "Expand"}) {
    if (OpRegistry::instance().schema(op) == nullptr) {
      continue;  // not an op of this build (the list names gradient ops that may be expressed otherwise)
    }
    EXPECT_EQ(fallback.count(op), 0U) << op << " runs through host staging on CUDA";
  }
}

// Ops without CUDA kernels yet run their CPU kernels through host staging (Note [Host fallback]); Resize's
// channels-last nodes reach its CPU kernel as they are (it reads that layout itself), without device transposes.
TEST(CudaBackendTest, ResizeAndEinsumTakeTheHostFallback) {
  registerCudaKernels();
  const std::set<std::string> fallback = fallbackSet();
  for (const char* op : {"Resize", "ResizeGrad", "Einsum"}) {
    EXPECT_EQ(fallback.count(op), 1U) << op;
  }
  for (const char* op : {"Resize", "ResizeGrad"}) {
    const auto native = OpRegistry::instance().nativeChannelsLast(op, DeviceType::CUDA);
    ASSERT_TRUE(native) << op;
    Attributes attrs;
    attrs.set("channels_last", std::int64_t{1});
    const std::string node = "node";
    EXPECT_TRUE(native(KernelInit{{}, {}, attrs, node, false})) << op;
  }
}

TEST(CudaBackendTest, MachineWithoutGpuIsExplained) {
  const DeviceProbe probe = probeDevices();
  if (probe.count > 0) {
    GTEST_SKIP() << "this machine has a GPU";
  }
  EXPECT_FALSE(probe.whyNone.empty());
  try {
    initializeDevice(0);
    FAIL() << "initializeDevice succeeded without a GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot use CUDA"), std::string::npos) << e.what();
  }
}

TEST(CudaBackendTest, MonitorWithoutNvmlReportsWhy) {
  if (probeDevices().count > 0) {
    GTEST_SKIP() << "this machine has a GPU (CudaDeviceTest covers sampling)";
  }
  GpuMonitor monitor(0, std::chrono::milliseconds(10));
  const GpuUsageSummary usage = monitor.stop();
  EXPECT_FALSE(usage.available);
  EXPECT_FALSE(usage.unavailableReason.empty());
}

}  // namespace
}  // namespace strata::cuda
