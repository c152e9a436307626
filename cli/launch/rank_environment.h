#pragma once

// Where this process stands in the job, from the variables its launcher set (cli/launch/launcher.h's rankEnvironment()
// reads this process's own). Pure parsing: the variables come through an EnvironmentLookup.

#include <optional>
#include <string>
#include <vector>

#include "launch/environment_variables.h"
#include "strata/sdk/roles.h"

namespace strata::cli {

// Where this process stands in the job, read from torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or from Slurm's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, ...).
struct RankEnvironment {
  int rank = 0;
  int localRank = 0;
  int worldSize = 1;
  int localWorldSize = 1;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 29500;
  bool distributed = false;  // set by a launcher (ours, torchrun's variables, or srun)
  // Note [Slurm roles]: under srun the first tasks run the strategy's role processes. In such a task, which process
  // of which role (rank and localRank are then -1, worldSize the workers').
  struct RoleTask {
    std::string name;
    int index = 0;
    int count = 0;
  };
  std::optional<RoleTask> roleTask = std::nullopt;
  int roleTasks = 0;  // tasks that run roles (0 outside srun): SLURM_PROCID - roleTasks is the rank
};

namespace detail {

// The rank environment the variables of `lookup` describe; throws Error naming the variable and its value when one
// is malformed. Under srun, `roles` (the strategy's StrategyRequirements::roles) take the first tasks (Note [Slurm
// roles]).
RankEnvironment readRankEnvironment(const EnvironmentLookup& lookup, const std::vector<RoleRequest>& roles);

// Whether `lookup` describes a rank (RANK or SLURM_PROCID is set): started by our launcher, torchrun, or srun.
bool startedAsRank(const EnvironmentLookup& lookup);

}  // namespace detail
}  // namespace strata::cli
