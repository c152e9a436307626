#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "strata/device.h"
#include "strata/program.h"

namespace strata {

struct NodeEvent {
  std::size_t stepIndex;
  const ProgramStep& step;
};

using NodeHook = std::function<void(const NodeEvent&)>;
// Called with a parameter index when that parameter's gradient is final (in the order gradients finalise).
using GradientReadyHook = std::function<void(int parameter)>;

// Runs a static Program on one device. Intermediate buffers are released right after their last use, so live
// activation memory follows the plan's liveness (Program::peakActivationBytes).
class Executor {
 public:
  Executor(Program program, Device device = Device::cpu());

  // Runs the plan once. Inputs are in graph-input order; their dtypes and shapes must match the plan's.
  // The work is enqueued on the device's stream; with synchronize == false the caller must call synchronize()
  // before reading the outputs on the host.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, bool synchronize = true);
  // Waits for the enqueued work; a device error raised here names the plan's device (Note [Asynchronous errors]).
  void synchronize();

  const Program& program() const { return program_; }
  // Runs so far; seeds per-run randomness (dropout), restored on resume so a resumed run draws the same masks.
  std::uint64_t runCount() const { return runCount_; }
  void setRunCount(std::uint64_t runs) { runCount_ = runs; }
  Device device() const { return device_; }

  // Hooks around each node; nearly free when none is registered. Returns an id for removeHook.
  int addBeforeNodeHook(NodeHook hook);
  int addAfterNodeHook(NodeHook hook);
  int addGradientReadyHook(GradientReadyHook hook);
  void removeHook(int id);

 private:
  void validateInputs(const std::vector<Tensor>& inputs) const;
  void fire(const std::vector<std::pair<int, NodeHook>>& hooks, std::size_t stepIndex) const;

  Program program_;
  Device device_;
  Stream* stream_;
  bool syncEachNode_ = false;  // STRATA_SYNC_EACH_NODE=1 on a device: errors name their node
  std::uint64_t runCount_ = 0;
  std::vector<std::pair<int, NodeHook>> beforeHooks_;
  std::vector<std::pair<int, NodeHook>> afterHooks_;
  std::vector<std::pair<int, GradientReadyHook>> gradientHooks_;
  int nextHookId_ = 0;
};

}  // namespace strata
