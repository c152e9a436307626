#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace strata::cli {

// How `strata train` starts its ranks, torchrun's options by another spelling.
struct LaunchOptions {
  int nproc = 1;   // ranks on this node
  int nnodes = 1;  // nodes in the job
  int nodeRank = 0;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 29500;
};

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
};

// Adds --nproc, --nnodes, --node-rank, --master-addr and --master-port to a command.
void addLaunchOptions(CLI::App& command, LaunchOptions& options);

// Reads the rank environment; throws Error naming the variable and its value when one is malformed.
RankEnvironment rankEnvironment();

// Acts as the launcher when this process was asked for several ranks and is not one itself (no RANK or
// SLURM_PROCID in the environment): starts the local ranks as copies of this binary with the same arguments,
// prefixes their output lines with "[rank R] ", and waits for all of them. Returns nullopt when this process
// should train itself, 0 when every rank succeeded. When a rank fails it stops the others and throws Error
// naming the rank and its status; when the launcher itself is interrupted (SIGINT/SIGTERM) it stops the ranks
// and dies by the same signal. `args` is the command line to repeat (default: this process's own).
std::optional<int> launchIfNeeded(const LaunchOptions& options, std::vector<std::string> args = {});

// CPU threads per rank from STRATA_THREADS (set by the launcher: cores / local ranks); 0 when unset.
int threadsFromEnvironment();

// Per-rank setup at the start of `strata train`: line-buffered stdout under a launcher, and a test hook: when
// STRATA_TEST_EXIT_RANK=r is set and this process is rank r, it prints a line and exits with status 3, so tests
// can make one rank fail (tests/cli/launcher_test.sh).
void prepareRank(const RankEnvironment& environment);

}  // namespace strata::cli
