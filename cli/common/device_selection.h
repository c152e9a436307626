#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "strata/device.h"
#include "strata/dtype.h"
#include "strata/graphs/graph.h"
#include "strata/optim/loss_scaler.h"

namespace strata::cli {

// --device and --precision, shared by the commands that run a model.
struct DeviceOptions {
  std::string device = "cpu";         // cpu | cuda | cuda:N | auto
  std::string precision = "tf32";     // fp32 | tf32 | bf16 | fp16
  std::string lossScale = "dynamic";  // fp16 only: dynamic | a fixed positive scale
  std::string channelsLast = "auto";  // off | on | auto
};

void addDeviceOptions(CLI::App& command, DeviceOptions& options);
// --loss-scale, for the commands that update weights over many steps (train).
void addLossScaleOption(CLI::App& command, DeviceOptions& options);

// --channels-last, for the commands that build a training plan (train, step).
void addChannelsLastOption(CLI::App& command, DeviceOptions& options);
// Whether the training plan of a model (`float32Model`: its inputs are float32) runs channels-last on `device`:
// auto chooses it for 16-bit runs on CUDA, where cuDNN's tensor-core convolutions are NHWC, and for float32 models
// in full precision on the CPU (Note [CPU channels-last training]).
bool channelsLastOf(const DeviceOptions& options, Device device, bool float32Model);
// Whether a model's inputs are all float32 (what channelsLastOf's auto asks of a model).
bool hasFloat32Inputs(const Graph& graph);
// The same for a forward-only plan (strata run): auto is also on for float32 models on the CPU.
bool channelsLastForInference(const DeviceOptions& options, Device device, bool float32);

// BFloat16 or Float16 for --precision bf16 / fp16 (mixed precision over float32 master weights); nullopt otherwise.
std::optional<DType> mixedPrecisionOf(const DeviceOptions& options);
// The loss scaling --precision fp16 trains with (from --loss-scale); nullopt for the other precisions.
std::optional<LossScalerOptions> lossScalerOptionsOf(const DeviceOptions& options);
// Checks the spelling of every device flag without touching a GPU, so a launcher can refuse a bad flag once,
// before it starts ranks that would each fail the same way after the rendezvous.
void checkDeviceFlags(const DeviceOptions& options);
// For commands that do not train (run): bf16 and fp16 are a training mode, so they are refused with why.
void requireFullPrecision(const DeviceOptions& options, const std::string& command);

// Resolves --device for this process (local rank r of a job takes GPU r modulo the GPUs visible), initialises the
// CUDA backend when it is chosen and applies --precision. `auto` falls back to the CPU, saying why; an explicit
// `cuda` on a machine without a usable GPU is an error that says what is missing.
Device selectDevice(const DeviceOptions& options, int localRank = 0);

// "cpu" or "cuda:0 (NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB)".
std::string describe(Device device);

}  // namespace strata::cli
