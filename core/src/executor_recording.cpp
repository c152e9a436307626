// Note [Recorded runs]: a static plan enqueues the same kernels on the same shapes at every run, so on a GPU the
// whole run can be recorded once (CUDA stream capture) and replayed as one graph launch, which removes the host's
// per-kernel launch cost (hundreds of launches per training step). What a replay cannot do decides when to record:
//   - it repeats device work only: host code inside the run (node hooks, a kernel that reads a device value back,
//     a host fallback kernel) does not run again. Hooks, and random ops whose kernel takes the per-run seed as a
//     launch argument, are refused up front (kernels that read KernelContext::deviceStep are fine: a recorded
//     run passes it, and the executor writes the run index there before each replay); host synchronisations
//     make the stream refuse the recording;
//   - it uses the recorded buffers: inputs are copied into the recording's own input buffers before each replay,
//     outputs are copied out after it, and the memory the recorded run allocated stays reserved for the replays;
//   - kernels choose algorithms (cuDNN's search synchronises) on their first runs, so recording waits for
//     kWarmupRuns node-by-node runs.
// Auto times kTimedRuns node-by-node runs against as many replays and keeps the faster; On replays whenever the
// plan can be recorded and fails otherwise.

#include <algorithm>
#include <chrono>

#include "strata/error.h"
#include "strata/executor.h"
#include "strata/op_registry.h"

namespace strata {
namespace {

constexpr int kWarmupRuns = 2;
constexpr std::size_t kTimedRuns = 3;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

Recording parseRecording(const std::string& text) {
  if (text == "off") {
    return Recording::Off;
  }
  if (text == "on") {
    return Recording::On;
  }
  if (text == "auto") {
    return Recording::Auto;
  }
  fail("unknown recording mode '{}': expected off, on or auto", text);
}

const char* recordingName(Recording mode) {
  switch (mode) {
    case Recording::Off:
      return "off";
    case Recording::On:
      return "on";
    case Recording::Auto:
      return "auto";
  }
  return "?";
}

void Executor::setRecording(Recording mode) {
  recorded_.reset();
  recordedInputs_.clear();
  recordedOutputs_.clear();
  recordedStep_ = Tensor();
  eagerTimes_.clear();
  replayTimes_.clear();
  warmupRuns_ = 0;
  phase_ = RecordingPhase::Warmup;
  recording_ = RecordingStatus{};
  recording_.mode = mode;
  recording_.detail = mode == Recording::Off ? "off" : "warming up";
}

void Executor::setStream(Stream& stream) {
  STRATA_CHECK(stream.device() == device_, "a plan on {} cannot run on a stream of {}", device_.toString(),
               stream.device().toString());
  stream_ = &stream;
  setRecording(recording_.mode);  // a recording belongs to the stream it was made on
}

namespace {
constexpr const char* kHooksInstalled =
    "node or gradient-ready hooks are installed (a strategy acts during the pass), and hooks run on the host";
}  // namespace

std::string Executor::whyNotRecordable() const {
  if (hooksInstalled()) {
    return kHooksInstalled;
  }
  if (syncEachNode_) {
    return "STRATA_SYNC_EACH_NODE is set";
  }
  for (const ProgramStep& step : program_.steps) {
    const OpSchema* schema = OpRegistry::instance().schema(step.opType);
    if (schema != nullptr && !schema->foldable && !step.kernel->readsDeviceStep()) {
      return fmt::format(
          "node '{}' ({}) draws new random numbers at every run from a seed its {} kernel takes "
          "on the host",
          step.nodeName, step.opType, device_.toString());
    }
  }
  return {};
}

std::string Executor::record() {
  recordedInputs_.clear();
  for (int id : program_.inputs) {
    // Allocated before recording starts, so they are ordinary buffers the host may copy into.
    recordedInputs_.push_back(
        Tensor::empty(program_.values[static_cast<std::size_t>(id)].meta, MemoryCategory::Activations, device_));
  }
  const bool readsStep = std::any_of(program_.steps.begin(), program_.steps.end(),
                                     [](const ProgramStep& s) { return s.kernel->readsDeviceStep(); });
  recordedStep_ = readsStep ? Tensor::zeros(DType::Int64, {1}, MemoryCategory::Other, device_) : Tensor();
  const auto* step = readsStep ? static_cast<const std::uint64_t*>(recordedStep_.rawData()) : nullptr;
  std::string whyNot;
  // `step` by value: the closure must not outlive this frame by reference (a stream that keeps it, such as the tests'
  // stand-in that replays by calling it again, would read a dead stack slot: ASan's stack-use-after-return).
  recorded_ = stream_->record([this, step] { recordedOutputs_ = runNodes(recordedInputs_, runCount_, step); }, &whyNot);
  if (!recorded_) {
    recordedInputs_.clear();
    recordedOutputs_.clear();
    recordedStep_ = Tensor();
    return whyNot.empty() ? "the stream refused without a reason" : whyNot;
  }
  return {};
}

std::vector<Tensor> Executor::replay(const std::vector<Tensor>& inputs) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Tensor& target = recordedInputs_[i];
    if (inputs[i].storage() != target.storage() || inputs[i].byteOffset() != target.byteOffset()) {
      target.copyFrom(inputs[i]);
    }
  }
  if (recordedStep_.defined()) {
    recordedStep_.copyFrom(Tensor::scalar(static_cast<std::int64_t>(runCount_)));
  }
  recorded_->replay();
  ++runCount_;
  std::vector<Tensor> outputs;
  outputs.reserve(recordedOutputs_.size());
  for (const Tensor& output : recordedOutputs_) {
    // The next replay overwrites the recorded outputs; the caller gets its own.
    outputs.push_back(output.defined() ? output.clone(MemoryCategory::Activations) : Tensor());
  }
  return outputs;
}

void Executor::settle(bool replaying, std::string detail) {
  if (!replaying) {
    recorded_.reset();
    recordedInputs_.clear();
    recordedOutputs_.clear();
    recordedStep_ = Tensor();
  }
  recording_.replaying = replaying;
  recording_.detail = std::move(detail);
  phase_ = RecordingPhase::Settled;
}

template <typename Fn>
std::vector<Tensor> Executor::timed(std::vector<double>& times, Fn&& run) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<Tensor> outputs = run();
  synchronize();
  times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  return outputs;
}

std::vector<Tensor> Executor::runRecordingPhase(const std::vector<Tensor>& inputs) {
  if (recorded_ && hooksInstalled()) {
    settle(false, fmt::format("node by node: {} (since the run was recorded)", kHooksInstalled));
  }
  switch (phase_) {
    case RecordingPhase::Warmup:
      if (++warmupRuns_ >= kWarmupRuns) {
        phase_ = recording_.mode == Recording::Auto ? RecordingPhase::TimeEager : RecordingPhase::Record;
      }
      return runEagerly(inputs);
    case RecordingPhase::TimeEager: {
      std::vector<Tensor> outputs = timed(eagerTimes_, [&] { return runEagerly(inputs); });
      if (eagerTimes_.size() >= kTimedRuns) {
        phase_ = RecordingPhase::Record;
      }
      return outputs;
    }
    case RecordingPhase::Record: {
      std::string whyNot = whyNotRecordable();
      if (whyNot.empty()) {
        whyNot = record();
      }
      if (!whyNot.empty()) {
        if (recording_.mode == Recording::On) {
          settle(false, "node by node: " + whyNot);
          fail("cannot record the run on {} for replay: {}", device_.toString(), whyNot);
        }
        settle(false, "node by node: " + whyNot);
        return runEagerly(inputs);
      }
      if (recording_.mode == Recording::Auto) {
        phase_ = RecordingPhase::TimeReplay;  // the first replay uploads the graph: not timed
      } else {
        settle(true, "replayed (recording on)");
      }
      return replay(inputs);
    }
    case RecordingPhase::TimeReplay: {
      std::vector<Tensor> outputs = timed(replayTimes_, [&] { return replay(inputs); });
      if (replayTimes_.size() >= kTimedRuns) {
        recording_.eagerMs = median(eagerTimes_);
        recording_.replayMs = median(replayTimes_);
        if (recording_.replayMs < recording_.eagerMs) {
          settle(true, fmt::format("replayed: {:.3f} ms per run against {:.3f} ms node by node", recording_.replayMs,
                                   recording_.eagerMs));
        } else {
          settle(false, fmt::format("node by node: {:.3f} ms per run against {:.3f} ms replayed", recording_.eagerMs,
                                    recording_.replayMs));
        }
      }
      return outputs;
    }
    case RecordingPhase::Settled:
      break;
  }
  return recorded_ ? replay(inputs) : runEagerly(inputs);
}

}  // namespace strata
