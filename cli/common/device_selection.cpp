#include "common/device_selection.h"

#include <algorithm>
#include <cmath>

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
}

// Mixed precision on the CPU runs the 16-bit ops in float32 and rounds their results (Note [Low precision on the
// CPU]): right for checking a model, slower than fp32.
Device noteEmulation(const DeviceOptions& options, Device device) {
  if (device.type == DeviceType::CPU && mixedPrecisionOf(options)) {
    spdlog::info(
        "--precision {} on the CPU: 16-bit tensors with float32 arithmetic (emulated: for checking, slower "
        "than fp32)",
        options.precision);
  }
  return device;
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
                     "fp32 | tf32 (default: TF32 tensor cores for float32 convolutions and GEMMs on GPUs) | bf16 | "
                     "fp16 (mixed precision: convolutions and GEMMs in 16 bits, float32 master weights)");
}

void addLossScaleOption(CLI::App& command, DeviceOptions& options) {
  command.add_option("--loss-scale", options.lossScale,
                     "with --precision fp16: dynamic (default; starts at 65536, halves on overflow, doubles after 2000 "
                     "good steps), dynamic:START, or a fixed scale");
}

void addChannelsLastOption(CLI::App& command, DeviceOptions& options) {
  command.add_option("--channels-last", options.channelsLast,
                     "auto (default) | on | off: run convolutions, batch norm and pooling on NHWC activations and "
                     "KRSC weights (auto: on the CPU for float32 models in full precision, where the weights are "
                     "then stored KRSC; on CUDA for bf16 and fp16, where cuDNN's tensor cores want NHWC)");
}

namespace {

bool explicitChannelsLast(const DeviceOptions& options, bool& on) {
  if (options.channelsLast == "on" || options.channelsLast == "off") {
    on = options.channelsLast == "on";
    return true;
  }
  if (options.channelsLast != "auto")
    fail("--channels-last {}: expected off, on or auto", options.channelsLast);
  return false;
}

}  // namespace

// Note [CPU channels-last training]: with its weights stored KRSC (Note [Channels-last weights]) a channels-last
// training step transposes no parameter, and the CPU's kernels read NHWC activations without the reorders
// oneDNN's convolutions make around plain NCHW: on the issue-18 models 0.80-0.94x the channels-first step natively
// (AVX-512; VGG16, whose time is in large convolutions either way, 0.99) and 0.74-0.92x under the AVX2 cap (VGG16
// 1.04 and the bundled CNN 1.08, within the host's noise; docs/performance.md). Float64 models keep channels-first
// (their layout-aware kernels are channels-first only), and so do mixed-precision plans on the CPU (the CPU's
// fusions are full precision).
bool channelsLastOf(const DeviceOptions& options, Device device, bool float32Model) {
  bool on = false;
  if (explicitChannelsLast(options, on))
    return on;
  const bool mixed = mixedPrecisionOf(options).has_value();
  return device.type == DeviceType::CUDA ? mixed : float32Model && !mixed;
}

bool hasFloat32Inputs(const Graph& graph) {
  return std::all_of(graph.inputs.begin(), graph.inputs.end(),
                     [&](int v) { return graph.values[static_cast<std::size_t>(v)].meta.dtype == DType::Float32; });
}

// Note [CPU channels-last]: in a forward-only plan the weights' transposes fold into the plan, so on the CPU every
// convolution, pooling and batch norm runs without reordering an activation: 8-27% faster forward passes on the
// study's models (docs/performance.md).
bool channelsLastForInference(const DeviceOptions& options, Device device, bool float32) {
  bool on = false;
  if (explicitChannelsLast(options, on))
    return on;
  return device.type == DeviceType::CPU ? float32 : mixedPrecisionOf(options).has_value();
}

std::optional<DType> mixedPrecisionOf(const DeviceOptions& options) {
  if (options.precision == "bf16") {
    return DType::BFloat16;
  }
  if (options.precision == "fp16") {
    return DType::Float16;
  }
  return std::nullopt;
}

std::optional<LossScalerOptions> lossScalerOptionsOf(const DeviceOptions& options) {
  if (options.precision != "fp16") {
    if (options.lossScale != "dynamic") {
      fail("--loss-scale {}: loss scaling applies to --precision fp16 only (bf16 has float32's range)",
           options.lossScale);
    }
    return std::nullopt;
  }
  LossScalerOptions scaler;
  const std::string& spec = options.lossScale;
  if (spec == "dynamic") {
    return scaler;
  }
  const bool dynamic = spec.rfind("dynamic:", 0) == 0;
  const std::string number = dynamic ? spec.substr(8) : spec;
  try {
    std::size_t used = 0;
    scaler.initialScale = std::stod(number, &used);
    scaler.dynamic = dynamic;
    if (used == number.size() && scaler.initialScale > 0 && std::isfinite(static_cast<float>(scaler.initialScale))) {
      return scaler;
    }
  } catch (const std::exception&) {
  }
  fail("--loss-scale {}: expected dynamic, dynamic:START or a fixed scale (positive, within float32's range)", spec);
}

void checkDeviceFlags(const DeviceOptions& options) {
  checkPrecision(options.precision);
  const std::string& spec = options.device;
  if (spec != "cpu" && spec != "auto") {
    if (spec.rfind("cuda", 0) != 0) {
      fail("--device {}: expected cpu, cuda, cuda:N or auto", spec);
    }
    parseCudaIndex(spec);
  }
  channelsLastOf(options, Device::cpu(), true);
  lossScalerOptionsOf(options);
}

void requireFullPrecision(const DeviceOptions& options, const std::string& command) {
  if (mixedPrecisionOf(options)) {
    fail("--precision {}: {} runs in fp32 or tf32; mixed precision is a training mode (train, step)", options.precision,
         command);
  }
}

#ifdef STRATA_HAS_CUDA

Device selectDevice(const DeviceOptions& options, int localRank) {
  checkDeviceFlags(options);
  const std::string& spec = options.device;
  if (spec == "cpu") {
    return noteEmulation(options, Device::cpu());
  }
  const int requested = spec == "auto" ? -1 : parseCudaIndex(spec);
  const cuda::DeviceProbe probe = cuda::probeDevices();
  if (probe.count == 0) {
    if (spec == "auto") {
      spdlog::info("--device auto: training on the CPU ({})", probe.whyNone);
      return noteEmulation(options, Device::cpu());
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
  checkDeviceFlags(options);  // a malformed cuda:N is reported as such
  if (options.device == "cpu") {
    return noteEmulation(options, Device::cpu());
  }
  if (options.device == "auto") {
    spdlog::info("--device auto: training on the CPU (this strata was built without the CUDA backend)");
    return noteEmulation(options, Device::cpu());
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
