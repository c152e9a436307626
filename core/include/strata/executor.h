#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "strata/device.h"
#include "strata/program.h"
#include "strata/stream.h"

namespace strata {

struct NodeEvent {
  std::size_t stepIndex;
  const ProgramStep& step;
};

using NodeHook = std::function<void(const NodeEvent&)>;
// Called with a parameter index when that parameter's gradient is final (in the order gradients finalise).
using GradientReadyHook = std::function<void(int parameter)>;

// Whether a plan on a device records one run and then replays it (a CUDA graph: one launch instead of one per
// kernel). Note [Recorded runs] in executor_recording.cpp.
enum class Recording {
  Off,   // every run launches node by node
  On,    // record after the warm-up runs; an error when the plan cannot be recorded
  Auto,  // record, time replays against node-by-node runs, keep whichever is faster
};
Recording parseRecording(const std::string& text);  // "off" | "on" | "auto"
const char* recordingName(Recording mode);

struct RecordingStatus {
  Recording mode = Recording::Off;
  bool replaying = false;  // runs replay the recording now
  std::string detail;      // why runs are not replayed, or what decided
  double eagerMs = 0;      // auto: median time of a node-by-node run (0 when not measured)
  double replayMs = 0;     // auto: median time of a replayed run
};

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

  // Hooks around each node; nearly free when none is registered. Returns an id for removeHook. Hooks run on the
  // host at every node, so a plan with hooks is never replayed from a recording.
  int addBeforeNodeHook(NodeHook hook);
  int addAfterNodeHook(NodeHook hook);
  int addGradientReadyHook(GradientReadyHook hook);
  void removeHook(int id);

  // Record-and-replay of runs (off by default). Outputs of a replayed run are copies the caller owns, as they are
  // for node-by-node runs.
  void setRecording(Recording mode);
  const RecordingStatus& recording() const { return recording_; }
  // Enqueues on `stream` (of this plan's device) instead of the device's default stream.
  void setStream(Stream& stream);

  // Note [Accumulated gradients]: off (the default), a step writes a parameter's gradient straight into its bound
  // view of the flat gradient buffer, overwriting it. On, the step computes into a temporary (category Gradients)
  // that is added into the bound view (the device's Add kernel, on this plan's stream) and freed at once, so
  // gradients sum over runs while only one node's gradients exist twice. Steps that read a gradient later in the same
  // run see the sum. Changing the mode drops a recorded run (it bakes in the adds or their absence).
  void setAccumulateGradients(bool on);
  bool accumulatesGradients() const { return accumulateGradients_; }

 private:
  enum class RecordingPhase { Warmup, TimeEager, Record, TimeReplay, Settled };

  void validateInputs(const std::vector<Tensor>& inputs) const;
  void fire(const std::vector<std::pair<int, NodeHook>>& hooks, std::size_t stepIndex) const;
  // One run, node by node; `runIndex` seeds per-run randomness, read from `deviceStep` by kernels that can when it
  // is given (recordings only: node-by-node runs pass the seed as a launch argument).
  std::vector<Tensor> runNodes(const std::vector<Tensor>& inputs, std::uint64_t runIndex,
                               const std::uint64_t* deviceStep = nullptr);
  // The next run, node by node.
  std::vector<Tensor> runEagerly(const std::vector<Tensor>& inputs);
  // Adds each temporary gradient of `step` into its bound view (accumulate mode), leaving the view in its slot.
  void finishStep(std::size_t s, std::vector<Tensor>& slots);
  void accumulateInto(const ProgramStep& step, std::vector<Tensor>& slots, KernelContext& ctx);
  // executor_recording.cpp
  std::vector<Tensor> runRecordingPhase(const std::vector<Tensor>& inputs);
  std::string whyNotRecordable() const;
  bool hooksInstalled() const { return !beforeHooks_.empty() || !afterHooks_.empty() || !gradientHooks_.empty(); }
  std::string record();  // "" on success
  std::vector<Tensor> replay(const std::vector<Tensor>& inputs);
  void settle(bool replaying, std::string detail);
  template <typename Fn>
  std::vector<Tensor> timed(std::vector<double>& times, Fn&& run);

  Program program_;
  Device device_;
  Stream* stream_;
  bool syncEachNode_ = false;  // STRATA_SYNC_EACH_NODE=1 on a device: errors name their node
  // On the CPU the executor yields between nodes while a collective is in flight (Note [Giving way to
  // communication]); a device's host thread only launches kernels, and a yield would add to each launch.
  bool givesWay_ = false;
  std::uint64_t runCount_ = 0;
  std::vector<std::pair<int, NodeHook>> beforeHooks_;
  std::vector<std::pair<int, NodeHook>> afterHooks_;
  std::vector<std::pair<int, GradientReadyHook>> gradientHooks_;
  int nextHookId_ = 0;
  bool accumulateGradients_ = false;
  // By value id: the device's Add kernel for each gradient value (created when accumulation is first turned on).
  std::vector<std::unique_ptr<OpKernel>> accumulateKernels_;

  RecordingStatus recording_;
  RecordingPhase phase_ = RecordingPhase::Warmup;
  int warmupRuns_ = 0;
  std::vector<double> eagerTimes_, replayTimes_;
  std::unique_ptr<RecordedWork> recorded_;
  std::vector<Tensor> recordedInputs_;   // replays read their inputs here
  std::vector<Tensor> recordedOutputs_;  // and leave their outputs here
  Tensor recordedStep_;                  // the run index replays read (KernelContext::deviceStep)
};

}  // namespace strata
