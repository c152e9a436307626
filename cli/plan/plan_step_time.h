#pragma once

// `strata plan`'s step-time model: the calibrated compute plus the collectives each strategy's schedule issues per
// optimizer step, sized from the plan's flat buffers (DDP's buckets, FSDP's units, PS's key ranges).

#include "plan/memory_prediction.h"
#include "plan/plan_calibration.h"

namespace strata::cli {

struct StepTimePrediction {
  double computeS = 0;        // forward + backward of every micro-batch, and the optimizer on this rank
  double communicationS = 0;  // the collectives (or pushes and pulls) of one step (Note [Step time and overlap])
  double totalS() const { return computeS + communicationS; }
};

// `groups` are the parameter groups of a plan built for `query` (FSDP: one per unit). `latencyShare`: the share of
// the collectives' latency a rank's step pays, cores / (ranks per node x threads) where that is below 1 (Note [Step
// time and overlap]); see latencyShare().
StepTimePrediction predictStepTime(const MemoryQuery& query, const ParameterGroups& groups,
                                   const ComputeCalibration& compute, const CollectiveCalibration& collectives,
                                   double latencyShare = 1.0);

// min(1, cores / (ranksPerNode x threadsPerRank)).
double latencyShare(int cores, int ranksPerNode, int threadsPerRank);

}  // namespace strata::cli
