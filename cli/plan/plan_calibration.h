#pragma once

// `strata plan`'s measurements on this machine: a few training steps of the plan (compute, the optimizer's update,
// the kernels' workspace) and the job's collectives (Gloo over TCP between N ranks) at two sizes, fitted to
// latency + bytes / bandwidth.

#include <cstdint>
#include <string>
#include <vector>

#include "strata/graphs/training_plan.h"
#include "strata/optim/optimizer.h"

namespace strata::cli {

struct ComputeCalibration {
  int steps = 0;                    // timed steps (after warm-up); 0: not timed
  double forwardBackwardS = 0;      // median forward + loss + backward of one micro-batch
  double optimizerS = 0;            // median optimizer update over every parameter
  std::int64_t workspaceBytes = 0;  // the peak of the workspace category over the steps (kernel scratch, oneDNN's
                                    // reordered weights): measured, not replayed
};

// Runs `warmup + steps` training steps of `plan` (one process, the threads already applied) on synthetic inputs,
// with the run's optimizer; steps = 0 runs one untimed step for the workspace only.
ComputeCalibration calibrateCompute(TrainingPlan& plan, const std::vector<TensorMeta>& inputMetas,
                                    const OptimizerOptions& optimizer, int steps);

// Note [Calibrating beside the other ranks]: a job's local ranks compute at the same time on the node's cores
// (and memory bandwidth): measured alone, one rank's step was 20 ms, beside another copy 33 ms on the 2-core build
// machine. So the calibration runs ranks-per-node - 1 other copies of the step (`strata plan --calibration-load`,
// processes like the job's ranks) while it times its own. They are stopped (SIGTERM) and reaped when this object
// goes.
class ConcurrentRanks {
 public:
  // Starts `copies` processes running `args` (argv[0] excluded) of this binary.
  ConcurrentRanks(int copies, const std::vector<std::string>& args);
  ~ConcurrentRanks();
  ConcurrentRanks(const ConcurrentRanks&) = delete;
  ConcurrentRanks& operator=(const ConcurrentRanks&) = delete;

 private:
  std::vector<int> pids_;
};

// seconds(bytes) = latencyS + bytes / bytesPerS, bytes being the full tensor's (the all-reduced buffer, the
// reduce-scatter's input, the all-gather's output).
struct CollectiveFit {
  double latencyS = 0;
  double bytesPerS = 0;
  double seconds(std::int64_t bytes) const;
};

struct CollectiveCalibration {
  int ranks = 1;
  std::int64_t smallBytes = 0;
  std::int64_t largeBytes = 0;
  // Median seconds of all-reduce, all-gather and reduce-scatter at the small and the large size, in that order.
  std::vector<double> measuredS;
  CollectiveFit allReduce;
  CollectiveFit allGather;
  CollectiveFit reduceScatter;
};

// Measures the collectives between `ranks` ranks run as threads of this process, each with its own
// GlooProcessGroup over loopback TCP (the transport of a CPU job on one node), `repeats` times per size.
CollectiveCalibration calibrateCollectives(int ranks, std::int64_t largeBytes, int repeats);

}  // namespace strata::cli
