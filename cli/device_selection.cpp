#include "device_selection.h"

#include <spdlog/spdlog.h>

#include "strata/error.h"
#ifdef STRATA_HAS_CUDA
#include "strata/cuda/backend.h"
#endif

namespace strata::cli {
namespace {

void checkPrecision(const std::string& precision) {
  if (precision != "fp32" && precision != "tf32" && precision != "bf16" && precision != "fp16") {
    fail("--precision {}: expected fp32, tf32, bf16 or fp16", precision);
  }
  if (precision == "bf16" || precision == "fp16") {
    // The kernels take 16-bit tensors, but the trainer does not yet keep float32 master weights, cast the graph
    // or scale the loss: refuse rather than train in a precision the user did not ask for.
    fail("--precision {}: mixed-precision training is not implemented yet; use fp32 or tf32", precision);
  }
}

int parseCudaIndex(const std::string& spec) {
  if (spec == "cuda") {
    return -1;
  }
  try {
    std::size_t used = 0;
    const int index = std::stoi(spec.substr(5), &used);
    if (used == spec.size() - 5 && index >= 0) {
      return index;
    }
  } catch (const std::exception&) {
  }
  fail("--device {}: expected cpu, cuda, cuda:N or auto", spec);
}

}  // namespace

void addDeviceOptions(CLI::App& command, DeviceOptions& options) {
  command.add_option("--device", options.device,
                     "cpu | cuda | cuda:N | auto (CUDA when a GPU is present; each local rank takes its own GPU)");
  command.add_option("--precision", options.precision,
                     "fp32 | tf32 (default: TF32 tensor cores for float32 convolutions and GEMMs on GPUs)");
}

#ifdef STRATA_HAS_CUDA

Device selectDevice(const DeviceOptions& options, int localRank) {
  checkPrecision(options.precision);
  const std::string& spec = options.device;
  if (spec == "cpu") {
    return Device::cpu();
  }
  if (spec != "auto" && spec.rfind("cuda", 0) != 0) {
    fail("--device {}: expected cpu, cuda, cuda:N or auto", spec);
  }
  const int requested = spec == "auto" ? -1 : parseCudaIndex(spec);
  const cuda::DeviceProbe probe = cuda::probeDevices();
  if (probe.count == 0) {
    if (spec == "auto") {
      spdlog::info("--device auto: training on the CPU ({})", probe.whyNone);
      return Device::cpu();
    }
    fail("--device {}: cannot use CUDA: {}. Run with --device cpu (or auto) to use the CPU", spec, probe.whyNone);
  }
  const int index = requested >= 0 ? requested : localRank % probe.count;
  cuda::setTf32(options.precision != "fp32");
  cuda::initializeDevice(index);
  return Device::cuda(index);
}

std::string describe(Device device) {
  if (device.type == DeviceType::CPU) {
    return "cpu";
  }
  return fmt::format("{} ({})", device.toString(), cuda::describeDevice(device.index));
}

#else

Device selectDevice(const DeviceOptions& options, int /*localRank*/) {
  checkPrecision(options.precision);
  if (options.device == "cpu") {
    return Device::cpu();
  }
  if (options.device == "auto") {
    spdlog::info("--device auto: training on the CPU (this strata was built without the CUDA backend)");
    return Device::cpu();
  }
  fail(
      "--device {}: this strata was built without the CUDA backend (configured with -DSTRATA_CUDA=OFF or without "
      "nvcc); rebuild with the CUDA toolkit, or run with --device cpu",
      options.device);
}

std::string describe(Device device) {
  return device.toString();
}

#endif

}  // namespace strata::cli
