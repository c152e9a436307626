#pragma once

// Slurm's compressed lists, as srun sets them in each task's environment (Note [Slurm roles]): host lists
// (SLURM_JOB_NODELIST "node[01-03,07],gpu-a[1-2]"), task counts per node (SLURM_TASKS_PER_NODE "2(x3),1"), task ids
// (SLURM_GTIDS "0,1,4"), and the node of each task under srun's distribution. Pure functions: a malformed list
// throws Error naming the variable (or the node list) and its text.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace strata::cli::detail {

// The most tasks or hosts Strata expands from Slurm's compressed lists; more is a malformed variable.
constexpr std::size_t kMaxSlurmList = 1 << 20;

// Slurm's compressed per-node task counts, e.g. "2(x3),1" -> 2, 2, 2, 1. `name` is the variable, for errors.
std::vector<int> taskCounts(const char* name, const std::string& value);

// Tasks on node `nodeId` from Slurm's compressed per-node counts.
int tasksOnNode(const char* name, const std::string& value, int nodeId);

// A comma-separated list of task ids (SLURM_GTIDS): "0,1,4" -> 0, 1, 4.
std::vector<int> taskIds(const char* name, const std::string& value);

// The first host of a Slurm node list: "gpu[03-06,9],cpu1" -> "gpu03".
std::string firstHost(const std::string& nodeList);

// Every host of a Slurm node list, in order: "gpu[03-04,9],cpu1" -> gpu03, gpu04, gpu9, cpu1. Numbers keep the
// width of their range's lower bound ("n[008-010]" -> n008, n009, n010); several bracket groups in one name expand
// as a product ("n[1-2]-ib[01,03]" -> n1-ib01, n1-ib03, n2-ib01, n2-ib03).
std::vector<std::string> expandHostList(const std::string& list);

// Note [Slurm roles]: the node of every task of the step, from the tasks per node and srun's distribution across
// nodes (block, the default, or cyclic); nullopt for another distribution (plane, arbitrary), whose layout the
// environment does not describe.
std::optional<std::vector<int>> taskNodes(const std::vector<int>& counts, const std::string& distribution);

}  // namespace strata::cli::detail
