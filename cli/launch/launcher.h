#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "launch/rank_environment.h"  // RankEnvironment
#include "strata/sdk/roles.h"

namespace strata::cli {

// How `strata train` starts its ranks, torchrun's options by another spelling.
struct LaunchOptions {
  int nproc = 1;   // ranks on this node
  int nnodes = 1;  // nodes in the job
  int nodeRank = 0;
  std::string masterAddr = "127.0.0.1";
  // The store's port. Unless --master-port was given (masterPortGiven) or MASTER_PORT is set, a job on one node
  // takes a free port instead (Note [Standalone port] in free_port.h); over several nodes this default is kept.
  int masterPort = 29500;
  bool masterPortGiven = false;  // --master-port was on the command line
  // How often a rank other than 0 that dies is started again, when the strategy can take it back
  // (StrategyRequirements::rejoinsWorkers; Note [Rejoining workers]). 0: a dead rank ends the job.
  int maxRestarts = 0;
};

// The role processes a strategy asks for (StrategyRequirements::roles) and what they need to load it. The launcher
// of the node a process is placed on (RoleRequest::nodes; node rank 0 by default) starts, for each role and index
// i < count, `strata role <name> --index i --count N --workers W --nnodes K --strategy S [--strategy-opt k=v]...
// [--plugin-dir D]... --timeout T` (see role_command.h) with MASTER_ADDR and MASTER_PORT set.
struct RoleLaunch {
  std::vector<RoleRequest> roles;
  std::string strategy;
  std::vector<std::string> strategyOptions;  // key=value, as given to --strategy-opt
  std::vector<std::string> pluginDirs;
  double timeoutS = 300;
  // StrategyRequirements::toleratesWorkerLoss: a rank other than 0 that dies does not end the job; the launcher
  // writes its departure into the store (Note [Departed ranks]).
  bool ranksMayDepart = false;
  // StrategyRequirements::rejoinsWorkers: a rank other than 0 that dies is started again (LaunchOptions::maxRestarts)
  // with STRATA_RANK_RESTARTS=n, and rejoins the job (Note [Rejoining workers]).
  bool ranksMayRejoin = false;
};

// Adds --nproc, --nnodes, --node-rank, --master-addr and --master-port to a command.
void addLaunchOptions(CLI::App& command, LaunchOptions& options);

// Reads the rank environment; throws Error naming the variable and its value when one is malformed. Under srun,
// `roles` (the strategy's StrategyRequirements::roles) take the first tasks (Note [Slurm roles]).
RankEnvironment rankEnvironment(const std::vector<RoleRequest>& roles = {});

// Acts as the launcher when this process was asked for several ranks, or for roles, and is not a rank itself (no
// RANK or SLURM_PROCID in the environment): starts the local ranks as copies of this binary with the same
// arguments, and the processes of `roles` placed on this node (RoleRequest::nodes, node 0 by default); prefixes
// their output lines with "[rank R] " or "[<role> <i>] ", and waits for the ranks. Returns nullopt when this process
// should train itself, 0 when every rank succeeded. When every rank is done it stops the roles (SIGTERM, SIGKILL after
// a grace period) and waits for them. When a rank, or a role before the ranks are done, fails, it stops every other
// process and throws Error naming the rank or role, its index and status; when the launcher itself is interrupted
// (SIGINT/SIGTERM) it stops them all and dies by the same signal. `args` is the command line to repeat (default: this
// process's own).
std::optional<int> launchIfNeeded(const LaunchOptions& options, const RoleLaunch& roles = {},
                                  std::vector<std::string> args = {});

// Whether launchIfNeeded would make this process the launcher of several ranks (it is not a rank itself), so that
// work every rank would repeat (tokenizing a corpus) can be done once before they start.
bool rankEnvironmentIsLauncher(const LaunchOptions& options);

namespace detail {
// The cores this process may run on (its affinity mask); the launcher gives each of N local ranks 1/N of them.
int availableCores();
}  // namespace detail

// How often the launcher has restarted this rank (STRATA_RANK_RESTARTS; Note [Rejoining workers]); 0 when unset.
int rankRestarts();

// CPU threads per rank from STRATA_THREADS (set by the launcher: cores / local ranks); 0 when unset.
int threadsFromEnvironment();

// Per-rank setup at the start of `strata train`: line-buffered stdout under a launcher, and a test hook: when
// STRATA_TEST_EXIT_RANK=r is set and this process is rank r, it prints a line and exits with status 3, so tests
// can make one rank fail (tests/cli/launcher_test.sh).
void prepareRank(const RankEnvironment& environment);

}  // namespace strata::cli
