#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "strata/device.h"

namespace strata::cli {

// --device and --precision, shared by the commands that run a model.
struct DeviceOptions {
  std::string device = "cpu";      // cpu | cuda | cuda:N | auto
  std::string precision = "tf32";  // fp32 | tf32 | bf16 | fp16
};

void addDeviceOptions(CLI::App& command, DeviceOptions& options);

// Resolves --device for this process (local rank r of a job takes GPU r modulo the GPUs visible), initialises the
// CUDA backend when it is chosen and applies --precision. `auto` falls back to the CPU, saying why; an explicit
// `cuda` on a machine without a usable GPU is an error that says what is missing.
Device selectDevice(const DeviceOptions& options, int localRank = 0);

// "cpu" or "cuda:0 (NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB)".
std::string describe(Device device);

}  // namespace strata::cli
