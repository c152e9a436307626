#include "launch/launcher.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "launch/child_process.h"
#include "launch/environment_variables.h"
#include "launch/free_port.h"
#include "launch/rank_environment.h"
#include "launch/rank_supervisor.h"
#include "strata/error.h"

// The launcher's facade: checks what `strata train` asked for and hands the work to its parts, the rank environment
// (rank_environment.h, over Slurm's lists in slurm_lists.h), the supervisor (rank_supervisor.h) and its children's
// processes and output (child_process.h, child_output.h).

namespace strata::cli {
namespace detail {

// Role names become command-line words and output prefixes; a strategy declaring something else is refused here,
// before any process starts.
void checkRoles(const RoleLaunch& launch) {
  for (const RoleRequest& role : launch.roles) {
    const bool word = !role.name.empty() && role.name.front() != '-' &&
                      std::all_of(role.name.begin(), role.name.end(),
                                  [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
    if (!word || role.count < 0) {
      fail(
          "strategy '{}' declares role '{}' with count {}: a role is a lower-case word (a-z, 0-9, '-') with a "
          "count of 0 or more",
          launch.strategy, role.name, role.count);
    }
  }
}

// The port of the job's store. Note [Standalone port] (free_port.h): a job on one node with no port asked for, by
// --master-port or MASTER_PORT, takes a free one, so two jobs on one machine do not collide on 29500; several nodes
// keep the default, which every node's launcher then names without talking to the others.
int storePort(const LaunchOptions& options) {
  if (options.nnodes > 1 || options.masterPortGiven || environmentValue("MASTER_PORT")) {
    return options.masterPort;
  }
  try {
    return freeTcpPort();
  } catch (const std::exception& e) {
    spdlog::warn("{}; the store uses port {}", e.what(), options.masterPort);
    return options.masterPort;
  }
}

}  // namespace detail

void addLaunchOptions(CLI::App& command, LaunchOptions& options) {
  command.add_option("--nproc,--nproc-per-node", options.nproc, "ranks to start on this node (as torchrun)")
      ->check(CLI::PositiveNumber);
  command.add_option("--nnodes", options.nnodes, "nodes in the job; start the same command on each")
      ->check(CLI::PositiveNumber);
  command.add_option("--node-rank", options.nodeRank, "this node's index, 0 to nnodes-1")
      ->check(CLI::NonNegativeNumber);
  command.add_option("--master-addr", options.masterAddr, "host of rank 0's rendezvous store");
  command
      .add_option("--master-port", options.masterPort,
                  "port of rank 0's rendezvous store (default: 29500 with --nnodes 2 or more; on one node a free "
                  "port, as torchrun's --standalone, so jobs on one machine do not collide)")
      ->check(CLI::Range(1, 65535))
      ->each([&options](const std::string&) { options.masterPortGiven = true; });
  command
      .add_option("--max-restarts", options.maxRestarts,
                  "start a rank other than 0 that dies again, up to N times, and let it rejoin (strategies that "
                  "can take it back: ps mode=sync)")
      ->check(CLI::NonNegativeNumber);
}

RankEnvironment rankEnvironment(const std::vector<RoleRequest>& roles) {
  return detail::readRankEnvironment(detail::environmentValue, roles);
}

std::optional<int> launchIfNeeded(const LaunchOptions& options, const RoleLaunch& roles,
                                  std::vector<std::string> args) {
  // Role processes need a launcher (and rank 0's store) even around a single rank.
  const bool anyRole =
      std::any_of(roles.roles.begin(), roles.roles.end(), [](const RoleRequest& r) { return r.count > 0; });
  if (options.nproc <= 1 && options.nnodes <= 1 && !anyRole) {
    return std::nullopt;
  }
  // Already a rank: started by this launcher, torchrun, or srun (which starts every rank itself).
  if (detail::startedAsRank(detail::environmentValue)) {
    return std::nullopt;
  }
  if (options.nproc < 1 || options.nnodes < 1) {
    fail("--nproc {} and --nnodes {} must both be at least 1", options.nproc, options.nnodes);
  }
  if (options.nodeRank < 0 || options.nodeRank >= options.nnodes) {
    fail("--node-rank {} is not in 0..{} (--nnodes {})", options.nodeRank, options.nnodes - 1, options.nnodes);
  }
  if (options.masterPort < 1 || options.masterPort > 65535) {
    fail("--master-port {} is not a port number (1-65535)", options.masterPort);
  }
  detail::checkRoles(roles);
  LaunchOptions launch = options;
  launch.masterPort = detail::storePort(options);
  return detail::superviseRanks(launch, roles, args.empty() ? detail::ownCommandLine() : std::move(args));
}

bool rankEnvironmentIsLauncher(const LaunchOptions& options) {
  return (options.nproc > 1 || options.nnodes > 1) && !detail::startedAsRank(detail::environmentValue);
}

int rankRestarts() {
  const auto value = detail::environmentValue("STRATA_RANK_RESTARTS");
  return value ? detail::nonNegativeVariable("STRATA_RANK_RESTARTS", *value) : 0;
}

int threadsFromEnvironment() {
  const auto value = detail::environmentValue("STRATA_THREADS");
  return value ? detail::positiveVariable("STRATA_THREADS", *value) : 0;
}

void prepareRank(const RankEnvironment& environment) {
  if (environment.distributed) {
    // stdout is a pipe to the launcher: flush each line so it arrives as printed and survives a SIGTERM.
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
  }
  const auto value = detail::environmentValue("STRATA_TEST_EXIT_RANK");
  if (!value || detail::nonNegativeVariable("STRATA_TEST_EXIT_RANK", *value) != environment.rank) {
    return;
  }
  fmt::print("test hook STRATA_TEST_EXIT_RANK: rank {} exits with status 3\n", environment.rank);
  std::fflush(stdout);
  std::exit(3);
}

}  // namespace strata::cli
