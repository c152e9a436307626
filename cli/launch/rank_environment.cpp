#include "launch/rank_environment.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launch/slurm_lists.h"
#include "strata/error.h"

namespace strata::cli::detail {

// Note [Slurm roles]: under srun every process of the job is a task, the strategy's role processes included: the
// first tasks run the roles (in the order the strategy declares them, each from index 0), the others are the
// workers, numbered from 0 (RANK = SLURM_PROCID - roles, WORLD_SIZE = SLURM_NTASKS - roles). A worker's local rank
// counts the workers on its node only, so the first worker of a node takes its first GPU. The tasks on this node are
// SLURM_GTIDS where srun sets it, else they follow from the tasks per node and srun's distribution (block or
// cyclic). Rank 0's store is on the node of task `roles` (worker 0), which MASTER_ADDR names, or else which the
// step's node list and that layout give.
void placeSlurmRoles(RankEnvironment& env, const std::vector<RoleRequest>& roles, int procId, int localId, int tasks,
                     const EnvironmentLookup& lookup) {
  int roleTasks = 0;
  for (const RoleRequest& role : roles) {
    if ((!role.nodes.empty() || !role.hosts.empty()) && role.count > 0) {
      fail(
          "role '{}' is placed on {} ({}), which strata's own launcher does; under srun the first {} task(s) run the "
          "roles, on the nodes srun gives them: drop the placement and choose the nodes with srun (e.g. its "
          "--distribution, --nodelist)",
          role.name, role.nodes.empty() ? "hosts" : "node ranks",
          role.nodes.empty() ? fmt::format("{}", fmt::join(role.hosts, ","))
                             : fmt::format("{}", fmt::join(role.nodes, ",")),
          roleTasks + role.count);
    }
    roleTasks += role.count;
  }
  if (roleTasks == 0) {
    return;
  }
  std::vector<std::string> declared;
  for (const RoleRequest& role : roles) {
    declared.push_back(fmt::format("{} x{}", role.name, role.count));
  }
  if (tasks <= roleTasks) {
    fail(
        "srun started {} task(s) (SLURM_NTASKS), but the strategy's roles take the first {} ({}) and the job needs "
        "at least one worker: start {} or more tasks",
        tasks, roleTasks, fmt::join(declared, ", "), roleTasks + 1);
  }
  // The global ids of the tasks on this node.
  std::vector<int> here;
  const auto perNode =
      lookup("SLURM_STEP_TASKS_PER_NODE") ? lookup("SLURM_STEP_TASKS_PER_NODE") : lookup("SLURM_TASKS_PER_NODE");
  const char* perNodeName = lookup("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
  std::vector<int> counts = perNode ? taskCounts(perNodeName, *perNode) : std::vector<int>{tasks};
  const std::string distribution = lookup("SLURM_DISTRIBUTION").value_or("");
  const std::optional<std::vector<int>> layout = taskNodes(counts, distribution);
  if (layout && layout->size() != static_cast<std::size_t>(tasks)) {
    fail("{}='{}' describes {} tasks, but SLURM_NTASKS says {}", perNodeName, perNode.value_or(""), layout->size(),
         tasks);
  }
  const int nodeId = lookup("SLURM_NODEID") ? nonNegativeVariable("SLURM_NODEID", *lookup("SLURM_NODEID")) : 0;
  if (const auto gtids = lookup("SLURM_GTIDS")) {
    here = taskIds("SLURM_GTIDS", *gtids);
  } else if (layout) {
    for (int t = 0; t < tasks; ++t) {
      if ((*layout)[static_cast<std::size_t>(t)] == nodeId) {
        here.push_back(t);
      }
    }
  } else {
    fail(
        "srun's distribution '{}' (SLURM_DISTRIBUTION) does not say which tasks share a node, and SLURM_GTIDS is not "
        "set: run the roles' tasks with --distribution block or cyclic",
        distribution);
  }
  std::sort(here.begin(), here.end());
  if (std::find(here.begin(), here.end(), procId) == here.end() ||
      std::count_if(here.begin(), here.end(), [&](int t) { return t < procId; }) != localId) {
    fail(
        "task {} (SLURM_PROCID) with local id {} (SLURM_LOCALID) is not where the tasks of node {} ({}) put it; "
        "srun's layout is not the one Strata read (SLURM_DISTRIBUTION='{}')",
        procId, localId, nodeId, fmt::join(here, ","), distribution);
  }
  const int workersHere =
      static_cast<int>(std::count_if(here.begin(), here.end(), [&](int t) { return t >= roleTasks; }));
  if (procId < roleTasks) {
    int first = 0;
    for (const RoleRequest& role : roles) {
      if (procId < first + role.count) {
        env.roleTask = RankEnvironment::RoleTask{role.name, procId - first, role.count};
        break;
      }
      first += role.count;
    }
    env.rank = -1;
    env.localRank = -1;
  } else {
    env.rank = procId - roleTasks;
    env.localRank =
        static_cast<int>(std::count_if(here.begin(), here.end(), [&](int t) { return t >= roleTasks && t < procId; }));
  }
  env.worldSize = tasks - roleTasks;
  env.localWorldSize = std::max(1, workersHere);
  env.roleTasks = roleTasks;
  if (!lookup("MASTER_ADDR")) {
    if (!layout) {
      fail(
          "set MASTER_ADDR to the host of task {} (worker rank 0, whose store the job meets at): srun's distribution "
          "'{}' does not say which node runs it",
          roleTasks, distribution);
    }
    const auto nodes = lookup("SLURM_STEP_NODELIST") ? lookup("SLURM_STEP_NODELIST") : lookup("SLURM_JOB_NODELIST");
    if (nodes && !nodes->empty()) {
      const std::vector<std::string> hosts = expandHostList(*nodes);
      const int node = (*layout)[static_cast<std::size_t>(roleTasks)];
      if (node >= static_cast<int>(hosts.size())) {
        fail("worker rank 0 (task {}) runs on node {}, but the node list '{}' names {} host(s)", roleTasks, node,
             *nodes, hosts.size());
      }
      env.masterAddr = hosts[static_cast<std::size_t>(node)];
    }
  }
}

// RANK, WORLD_SIZE and the local variables, as our launcher and torchrun set them.
void readTorchrunVariables(RankEnvironment& env, const std::string& rank, const EnvironmentLookup& lookup) {
  env.distributed = true;
  env.rank = nonNegativeVariable("RANK", rank);
  const auto world = lookup("WORLD_SIZE");
  if (!world) {
    fail("environment variable RANK='{}' is set but WORLD_SIZE is not; a launcher sets both", rank);
  }
  env.worldSize = positiveVariable("WORLD_SIZE", *world);
  // Without the local variables, assume one node.
  const auto local = lookup("LOCAL_RANK");
  env.localRank = local ? nonNegativeVariable("LOCAL_RANK", *local) : env.rank;
  const auto localWorld = lookup("LOCAL_WORLD_SIZE");
  env.localWorldSize = localWorld ? positiveVariable("LOCAL_WORLD_SIZE", *localWorld) : env.worldSize;
}

// A srun task's variables, then the role tasks' share of them (Note [Slurm roles]).
void readSlurmVariables(RankEnvironment& env, const std::string& procId, const std::vector<RoleRequest>& roles,
                        const EnvironmentLookup& lookup) {
  env.distributed = true;
  env.rank = nonNegativeVariable("SLURM_PROCID", procId);
  // The step's task count is what srun started; SLURM_NTASKS may describe the whole allocation.
  const char* worldName = lookup("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
  const auto world = lookup(worldName);
  if (!world) {
    fail("environment variable SLURM_PROCID='{}' is set but SLURM_NTASKS is not; start the ranks with srun", procId);
  }
  env.worldSize = positiveVariable(worldName, *world);
  const auto local = lookup("SLURM_LOCALID");
  env.localRank = local ? nonNegativeVariable("SLURM_LOCALID", *local) : env.rank;
  if (const auto perNode = lookup("SLURM_NTASKS_PER_NODE")) {
    env.localWorldSize = positiveVariable("SLURM_NTASKS_PER_NODE", *perNode);
  } else if (const auto stepPerNode = lookup("SLURM_STEP_TASKS_PER_NODE")) {
    const auto node = lookup("SLURM_NODEID");
    env.localWorldSize =
        tasksOnNode("SLURM_STEP_TASKS_PER_NODE", *stepPerNode, node ? nonNegativeVariable("SLURM_NODEID", *node) : 0);
  } else {
    env.localWorldSize = env.worldSize;
  }
  if (!lookup("MASTER_ADDR")) {
    const auto nodes = lookup("SLURM_STEP_NODELIST") ? lookup("SLURM_STEP_NODELIST") : lookup("SLURM_JOB_NODELIST");
    if (nodes && !nodes->empty()) {
      env.masterAddr = firstHost(*nodes);
    }
  }
  if (env.rank >= env.worldSize) {
    fail("rank {} is not below the world size {} (check RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS)", env.rank,
         env.worldSize);
  }
  placeSlurmRoles(env, roles, env.rank, env.localRank, env.worldSize, lookup);
}

RankEnvironment readRankEnvironment(const EnvironmentLookup& lookup, const std::vector<RoleRequest>& roles) {
  RankEnvironment env;
  if (const auto rank = lookup("RANK")) {
    readTorchrunVariables(env, *rank, lookup);
  } else if (const auto procId = lookup("SLURM_PROCID")) {
    readSlurmVariables(env, *procId, roles, lookup);
  }
  if (const auto addr = lookup("MASTER_ADDR")) {
    if (addr->empty()) {
      fail("environment variable MASTER_ADDR is empty; set it to the host of rank 0");
    }
    env.masterAddr = *addr;
  }
  if (const auto portText = lookup("MASTER_PORT")) {
    env.masterPort = portVariable("MASTER_PORT", *portText);
  }
  if (env.roleTask) {
    return env;  // a role process: no rank of its own
  }
  if (env.rank >= env.worldSize) {
    fail("rank {} is not below the world size {} (check RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS)", env.rank,
         env.worldSize);
  }
  if (env.localWorldSize > env.worldSize || env.localRank >= env.localWorldSize) {
    fail(
        "local rank {} of {} local ranks does not fit a world of {} (check LOCAL_RANK/LOCAL_WORLD_SIZE or "
        "SLURM_LOCALID/SLURM_NTASKS_PER_NODE)",
        env.localRank, env.localWorldSize, env.worldSize);
  }
  return env;
}

bool startedAsRank(const EnvironmentLookup& lookup) {
  return lookup("RANK").has_value() || lookup("SLURM_PROCID").has_value();
}

}  // namespace strata::cli::detail
