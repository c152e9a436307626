#pragma once

#include <string>
#include <vector>

namespace strata::cli {

// The flags of `strata role <name>`: one process of a role a strategy declares (StrategyRequirements::roles).
// Shared by the command and by the launcher, which builds the command line from them.
struct RoleOptions {
  std::string name;
  int index = 0;
  int count = 0;  // 0: the count the strategy declares
  int workers = 0;
  int nodes = 1;
  std::string strategy;
  std::vector<std::string> strategyOptions;  // key=value
  std::vector<std::string> pluginDirs;
  double timeoutS = 300;
  std::string masterAddr;   // empty: MASTER_ADDR, else 127.0.0.1
  int masterPort = 0;       // 0: MASTER_PORT, else 29500
  std::string hostAddress;  // empty: this host's address on the route to the master
};

// Runs one role process in this process until it is stopped (SIGTERM/SIGINT): what `strata role` does, and what a
// srun task that runs a role does (Note [Slurm roles]). Errors name the role and index.
void runRoleProcess(const RoleOptions& options);

// `role <name> --index I --count N --workers W --nnodes K --strategy S ...`: the arguments after the program name
// that run `options` (the master's address comes from the environment, as for the ranks).
std::vector<std::string> roleArguments(const RoleOptions& options);

}  // namespace strata::cli
