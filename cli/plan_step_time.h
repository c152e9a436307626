#pragma once

// `strata plan`'s step-time model: the calibrated compute plus the collectives each strategy's schedule issues per
// optimizer step, sized from the plan's flat buffers (DDP's buckets, FSDP's units, PS's key ranges).

#include "memory_prediction.h"
#include "plan_calibration.h"

namespace strata::cli {

struct StepTimePrediction {
  double computeS = 0;        // forward + backward of every micro-batch, and the optimizer on this rank
  double communicationS = 0;  // the collectives (or pushes and pulls) of one step, none of it hidden
  double totalS() const { return computeS + communicationS; }
};

// `groups` are the parameter groups of a plan built for `query` (FSDP: one per unit).
StepTimePrediction predictStepTime(const MemoryQuery& query, const ParameterGroups& groups,
                                   const ComputeCalibration& compute, const CollectiveCalibration& collectives);

}  // namespace strata::cli
