// cli/launch/rank_environment.cpp: where a rank stands in the job, from torchrun's or srun's variables (given here as a
// map, not the process's environment), and the role tasks under srun (Note [Slurm roles]).
#include "launch/rank_environment.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "strata/error.h"

namespace strata::cli {
namespace {

using Variables = std::map<std::string, std::string>;

RankEnvironment rankEnvironmentOf(const Variables& variables, const std::vector<RoleRequest>& roles = {}) {
  return detail::readRankEnvironment(
      [&variables](const char* name) -> std::optional<std::string> {
        const auto found = variables.find(name);
        return found == variables.end() ? std::nullopt : std::optional<std::string>(found->second);
      },
      roles);
}

// The message of the Error reading `variables` throws; "" when it throws none.
std::string rankEnvironmentError(const Variables& variables, const std::vector<RoleRequest>& roles = {}) {
  try {
    rankEnvironmentOf(variables, roles);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<RoleRequest> servers(int count) {
  return {RoleRequest{.name = "ps-server", .count = count}};
}

TEST(RankEnvironmentTest, WithoutALaunchersVariablesThisProcessIsTheOnlyRank) {
  const RankEnvironment env = rankEnvironmentOf({});
  EXPECT_FALSE(env.distributed);
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.localRank, 0);
  EXPECT_EQ(env.worldSize, 1);
  EXPECT_EQ(env.localWorldSize, 1);
  EXPECT_EQ(env.masterAddr, "127.0.0.1");
  EXPECT_EQ(env.masterPort, 29500);
  EXPECT_FALSE(env.roleTask.has_value());
  EXPECT_EQ(env.roleTasks, 0);
  EXPECT_EQ(rankEnvironmentOf({{"MASTER_PORT", "1234"}}).masterPort, 1234);
}

TEST(RankEnvironmentTest, ReadsTorchrunsVariables) {
  const RankEnvironment env = rankEnvironmentOf({{"RANK", "3"},
                                                 {"WORLD_SIZE", "8"},
                                                 {"LOCAL_RANK", "1"},
                                                 {"LOCAL_WORLD_SIZE", "4"},
                                                 {"MASTER_ADDR", "node01"},
                                                 {"MASTER_PORT", "29600"}});
  EXPECT_TRUE(env.distributed);
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.worldSize, 8);
  EXPECT_EQ(env.localRank, 1);
  EXPECT_EQ(env.localWorldSize, 4);
  EXPECT_EQ(env.masterAddr, "node01");
  EXPECT_EQ(env.masterPort, 29600);
}

TEST(RankEnvironmentTest, WithoutTheLocalVariablesAllRanksShareOneNode) {
  const RankEnvironment env = rankEnvironmentOf({{"RANK", "2"}, {"WORLD_SIZE", "4"}});
  EXPECT_EQ(env.localRank, 2);
  EXPECT_EQ(env.localWorldSize, 4);
}

TEST(RankEnvironmentTest, AMalformedTorchrunVariableIsNamedWithItsValue) {
  EXPECT_EQ(rankEnvironmentError({{"RANK", "x"}, {"WORLD_SIZE", "2"}}),
            "environment variable RANK='x' is not a non-negative integer");
  EXPECT_EQ(rankEnvironmentError({{"RANK", "0"}}),
            "environment variable RANK='0' is set but WORLD_SIZE is not; a launcher sets both");
  EXPECT_EQ(rankEnvironmentError({{"RANK", "0"}, {"WORLD_SIZE", "0"}}),
            "environment variable WORLD_SIZE='0' is not a positive integer");
  EXPECT_EQ(rankEnvironmentError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "99999"}}),
            "environment variable MASTER_PORT='99999' is not a port number (1-65535)");
  EXPECT_EQ(rankEnvironmentError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "0"}}),
            "environment variable MASTER_PORT='0' is not a port number (1-65535)");
  EXPECT_EQ(rankEnvironmentError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", ""}}),
            "environment variable MASTER_ADDR is empty; set it to the host of rank 0");
}

TEST(RankEnvironmentTest, ARankOutsideItsWorldIsRefused) {
  EXPECT_EQ(rankEnvironmentError({{"RANK", "4"}, {"WORLD_SIZE", "2"}}),
            "rank 4 is not below the world size 2 (check RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS)");
  EXPECT_EQ(rankEnvironmentError({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}),
            "local rank 2 of 2 local ranks does not fit a world of 2 (check LOCAL_RANK/LOCAL_WORLD_SIZE or "
            "SLURM_LOCALID/SLURM_NTASKS_PER_NODE)");
}

TEST(RankEnvironmentTest, ReadsSrunsVariablesAndFindsTheStoreOnTheFirstNode) {
  const RankEnvironment env = rankEnvironmentOf({{"SLURM_PROCID", "5"},
                                                 {"SLURM_NTASKS", "8"},
                                                 {"SLURM_LOCALID", "1"},
                                                 {"SLURM_NTASKS_PER_NODE", "4"},
                                                 {"SLURM_JOB_NODELIST", "gpu[03-04]"}});
  EXPECT_TRUE(env.distributed);
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.worldSize, 8);
  EXPECT_EQ(env.localRank, 1);
  EXPECT_EQ(env.localWorldSize, 4);
  EXPECT_EQ(env.masterAddr, "gpu03");
  EXPECT_EQ(env.masterPort, 29500);
}

TEST(RankEnvironmentTest, TheStepsVariablesWinOverTheAllocationsAndMasterAddrOverBoth) {
  Variables variables{{"SLURM_PROCID", "2"},
                      {"SLURM_NTASKS", "16"},
                      {"SLURM_STEP_NUM_TASKS", "6"},
                      {"SLURM_LOCALID", "0"},
                      {"SLURM_STEP_TASKS_PER_NODE", "2(x3)"},
                      {"SLURM_NODEID", "1"},
                      {"SLURM_STEP_NODELIST", "n[1-3]"},
                      {"SLURM_JOB_NODELIST", "other[1-9]"}};
  RankEnvironment env = rankEnvironmentOf(variables);
  EXPECT_EQ(env.worldSize, 6);
  EXPECT_EQ(env.localWorldSize, 2);
  EXPECT_EQ(env.masterAddr, "n1");
  variables["MASTER_ADDR"] = "head";
  EXPECT_EQ(rankEnvironmentOf(variables).masterAddr, "head");
}

TEST(RankEnvironmentTest, AMalformedSrunVariableIsNamedWithItsValue) {
  EXPECT_EQ(rankEnvironmentError({{"SLURM_PROCID", "0"}}),
            "environment variable SLURM_PROCID='0' is set but SLURM_NTASKS is not; start the ranks with srun");
  EXPECT_EQ(rankEnvironmentError({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "2"}}),
            "rank 4 is not below the world size 2 (check RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS)");
  EXPECT_EQ(rankEnvironmentError({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x"}}),
            "environment variable SLURM_STEP_TASKS_PER_NODE='2(x' is not a Slurm task count list like 2(x3),1");
  EXPECT_EQ(
      rankEnvironmentError(
          {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NODEID", "-1"}, {"SLURM_STEP_TASKS_PER_NODE", "2"}}),
      "environment variable SLURM_NODEID='-1' is not a non-negative integer");
}

// Note [Slurm roles]: 3 servers and 3 workers in blocks of 3 on two nodes: tasks 0-2 are the servers on node 0,
// tasks 3-5 the workers on node 1, whose first (worker 0, task 3) serves the store.
Variables twoNodesOfThree(int procId, int localId, int nodeId) {
  return {{"SLURM_PROCID", std::to_string(procId)}, {"SLURM_LOCALID", std::to_string(localId)},
          {"SLURM_NODEID", std::to_string(nodeId)}, {"SLURM_NTASKS", "6"},
          {"SLURM_STEP_TASKS_PER_NODE", "3(x2)"},   {"SLURM_STEP_NODELIST", "n[07-08]"}};
}

TEST(RankEnvironmentTest, UnderSrunTheFirstTasksRunTheRoles) {
  const RankEnvironment server = rankEnvironmentOf(twoNodesOfThree(1, 1, 0), servers(3));
  ASSERT_TRUE(server.roleTask.has_value());
  EXPECT_EQ(server.roleTask->name, "ps-server");
  EXPECT_EQ(server.roleTask->index, 1);
  EXPECT_EQ(server.roleTask->count, 3);
  EXPECT_EQ(server.rank, -1);
  EXPECT_EQ(server.localRank, -1);
  EXPECT_EQ(server.worldSize, 3);
  EXPECT_EQ(server.roleTasks, 3);
  EXPECT_EQ(server.masterAddr, "n08");  // worker 0's node, not the first one

  const RankEnvironment worker = rankEnvironmentOf(twoNodesOfThree(4, 1, 1), servers(3));
  EXPECT_FALSE(worker.roleTask.has_value());
  EXPECT_EQ(worker.rank, 1);
  EXPECT_EQ(worker.localRank, 1);
  EXPECT_EQ(worker.worldSize, 3);
  EXPECT_EQ(worker.localWorldSize, 3);
  EXPECT_EQ(worker.roleTasks, 3);
  EXPECT_EQ(worker.masterAddr, "n08");
}

TEST(RankEnvironmentTest, UnderSrunALocalRankCountsTheWorkersOfItsNodeOnly) {
  // Cyclic over two nodes of two: tasks 0 (the server) and 2 on node 0, tasks 1 (worker 0) and 3 on node 1.
  const RankEnvironment cyclic = rankEnvironmentOf({{"SLURM_PROCID", "2"},
                                                    {"SLURM_LOCALID", "1"},
                                                    {"SLURM_NODEID", "0"},
                                                    {"SLURM_NTASKS", "4"},
                                                    {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                                                    {"SLURM_DISTRIBUTION", "cyclic"},
                                                    {"SLURM_JOB_NODELIST", "a,b"}},
                                                   servers(1));
  EXPECT_EQ(cyclic.rank, 1);
  EXPECT_EQ(cyclic.localRank, 0);
  EXPECT_EQ(cyclic.localWorldSize, 1);
  EXPECT_EQ(cyclic.masterAddr, "b");
  // SLURM_GTIDS names this node's tasks whatever the distribution.
  const RankEnvironment listed = rankEnvironmentOf({{"SLURM_PROCID", "3"},
                                                    {"SLURM_LOCALID", "1"},
                                                    {"SLURM_NTASKS", "4"},
                                                    {"SLURM_GTIDS", "1,3"},
                                                    {"SLURM_DISTRIBUTION", "plane=2"},
                                                    {"MASTER_ADDR", "head"}},
                                                   servers(1));
  EXPECT_EQ(listed.rank, 2);
  EXPECT_EQ(listed.localRank, 1);
  EXPECT_EQ(listed.localWorldSize, 2);
  EXPECT_EQ(listed.masterAddr, "head");
}

TEST(RankEnvironmentTest, RolesUnderSrunThatCannotBePlacedAreRefusedSayingWhy) {
  EXPECT_EQ(
      rankEnvironmentError(twoNodesOfThree(1, 1, 0), {RoleRequest{.name = "ps-server", .count = 2, .nodes = {0, 1}}}),
      "role 'ps-server' is placed on node ranks (0,1), which strata's own launcher does; under srun the first 2 "
      "task(s) run the roles, on the nodes srun gives them: drop the placement and choose the nodes with srun "
      "(e.g. its --distribution, --nodelist)");
  EXPECT_EQ(rankEnvironmentError({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}, servers(2)),
            "srun started 2 task(s) (SLURM_NTASKS), but the strategy's roles take the first 2 (ps-server x2) and the "
            "job needs at least one worker: start 3 or more tasks");
  EXPECT_EQ(rankEnvironmentError({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_DISTRIBUTION", "plane=2"}},
                                 servers(1)),
            "srun's distribution 'plane=2' (SLURM_DISTRIBUTION) does not say which tasks share a node, and "
            "SLURM_GTIDS is not set: run the roles' tasks with --distribution block or cyclic");
  EXPECT_EQ(rankEnvironmentError({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "6"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}},
                                 servers(1)),
            "SLURM_STEP_TASKS_PER_NODE='2(x2)' describes 4 tasks, but SLURM_NTASKS says 6");
  EXPECT_EQ(rankEnvironmentError({{"SLURM_PROCID", "1"},
                                  {"SLURM_LOCALID", "0"},
                                  {"SLURM_NTASKS", "4"},
                                  {"SLURM_GTIDS", "0,2"},
                                  {"MASTER_ADDR", "head"}},
                                 servers(1)),
            "task 1 (SLURM_PROCID) with local id 0 (SLURM_LOCALID) is not where the tasks of node 0 (0,2) put it; "
            "srun's layout is not the one Strata read (SLURM_DISTRIBUTION='')");
}

TEST(RankEnvironmentTest, UnderSrunAMalformedOrShortNodeListIsNamed) {
  Variables variables = twoNodesOfThree(4, 1, 1);
  variables["SLURM_STEP_NODELIST"] = "n[07-08";
  EXPECT_EQ(rankEnvironmentError(variables, servers(3)), "Slurm node list 'n[07-08': '[' without ']' in 'n[07-08'");
  variables["SLURM_STEP_NODELIST"] = "solo";
  EXPECT_EQ(rankEnvironmentError(variables, servers(3)),
            "worker rank 0 (task 3) runs on node 1, but the node list 'solo' names 1 host(s)");
}

}  // namespace
}  // namespace strata::cli
