#pragma once

#include <cstdint>
#include <filesystem>

#include "strata/graphs/training_plan.h"
#include "strata/optim/optimizer.h"

namespace strata::cli {

struct CheckpointState {
  std::int64_t epochsDone = 0;
  std::int64_t steps = 0;
};

// A checkpoint directory: parameters, buffers and optimizer state as TensorProto files plus state.json (epochs,
// steps, optimizer steps, executor runs). Written to a temporary directory and renamed into place, so a crash
// while saving leaves the previous checkpoint intact.
void saveCheckpoint(const std::filesystem::path& dir, TrainingPlan& plan, const Optimizer& optimizer,
                    const CheckpointState& state);
// Restores a checkpoint into a plan and optimizer built for the same model; errors name the file and the
// mismatching tensor.
CheckpointState loadCheckpoint(const std::filesystem::path& dir, TrainingPlan& plan, Optimizer& optimizer);

}  // namespace strata::cli
