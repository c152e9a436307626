// cli/launch/slurm_lists.cpp: Slurm's compressed host lists, task counts and task ids, and srun's layout of tasks
// on nodes.
#include "launch/slurm_lists.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "strata/error.h"

namespace strata::cli {
namespace {

using detail::expandHostList;
using detail::firstHost;
using detail::taskCounts;
using detail::taskIds;
using detail::taskNodes;
using detail::tasksOnNode;
using Hosts = std::vector<std::string>;
using Ints = std::vector<int>;

// The message of the Error `parse` throws; "" when it throws none.
std::string slurmListError(const std::function<void()>& parse) {
  try {
    parse();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SlurmListsTest, ExpandsRangesAndSingleNumbersInOrder) {
  EXPECT_EQ(expandHostList("node[01-03,07],gpu-a[1-2]"),
            (Hosts{"node01", "node02", "node03", "node07", "gpu-a1", "gpu-a2"}));
  EXPECT_EQ(expandHostList("gpu[03-04,9],cpu1"), (Hosts{"gpu03", "gpu04", "gpu9", "cpu1"}));
  EXPECT_EQ(expandHostList("n[5]"), (Hosts{"n5"}));
}

TEST(SlurmListsTest, PadsEachNumberToTheWidthOfItsRangesLowerBound) {
  EXPECT_EQ(expandHostList("n[008-011]"), (Hosts{"n008", "n009", "n010", "n011"}));
  EXPECT_EQ(expandHostList("n[098-101]"), (Hosts{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expandHostList("n[8-10]"), (Hosts{"n8", "n9", "n10"}));
  EXPECT_EQ(expandHostList("n[001,5]"), (Hosts{"n001", "n5"}));
}

TEST(SlurmListsTest, ExpandsSeveralBracketGroupsOfOneNameAsAProduct) {
  EXPECT_EQ(expandHostList("n[1-2]-ib[01,03]"), (Hosts{"n1-ib01", "n1-ib03", "n2-ib01", "n2-ib03"}));
  EXPECT_EQ(expandHostList("rack[1-2]-node[7]"), (Hosts{"rack1-node7", "rack2-node7"}));
}

TEST(SlurmListsTest, SplitsNamesOnlyAtCommasOutsideBrackets) {
  EXPECT_EQ(expandHostList("a,b[1,3],c"), (Hosts{"a", "b1", "b3", "c"}));
  EXPECT_EQ(expandHostList("x[1-2,4],y[10-11],z"), (Hosts{"x1", "x2", "x4", "y10", "y11", "z"}));
  EXPECT_EQ(expandHostList("cpu1"), (Hosts{"cpu1"}));
  EXPECT_EQ(expandHostList("a,,b"), (Hosts{"a", "b"}));
  EXPECT_TRUE(expandHostList("").empty());
}

TEST(SlurmListsTest, AMalformedHostListNamesTheListAndTheBadPart) {
  EXPECT_EQ(slurmListError([] { expandHostList("n[1-2"); }), "Slurm node list 'n[1-2': '[' without ']' in 'n[1-2'");
  EXPECT_EQ(slurmListError([] { expandHostList("ok1,n[1-2"); }),
            "Slurm node list 'ok1,n[1-2': '[' without ']' in 'n[1-2'");
  EXPECT_EQ(slurmListError([] { expandHostList("n[a-3]"); }),
            "Slurm node list 'n[a-3]': 'a-3' is not a range of host numbers like 03-06");
  EXPECT_EQ(slurmListError([] { expandHostList("n[1-2-3]"); }),
            "Slurm node list 'n[1-2-3]': '1-2-3' is not a range of host numbers like 03-06");
  EXPECT_EQ(slurmListError([] { expandHostList("n[]"); }),
            "Slurm node list 'n[]': '' is not a range of host numbers like 03-06");
  EXPECT_EQ(slurmListError([] { expandHostList("n[1,]"); }),
            "Slurm node list 'n[1,]': '' is not a range of host numbers like 03-06");
  EXPECT_EQ(slurmListError([] { expandHostList("n[5-3]"); }),
            "Slurm node list 'n[5-3]': the range '5-3' is empty or too large");
  EXPECT_EQ(slurmListError([] { expandHostList("n[0-2000000]"); }),
            "Slurm node list 'n[0-2000000]': the range '0-2000000' is empty or too large");
  // The product of two groups counts: 1025 x 1024 names are more than Strata expands.
  EXPECT_EQ(slurmListError([] { expandHostList("a[0-1024]-[0-1023]"); }),
            "Slurm node list 'a[0-1024]-[0-1023]': the range '0-1024' is empty or too large");
}

TEST(SlurmListsTest, FirstHostIsTheFirstNameOfTheList) {
  EXPECT_EQ(firstHost("gpu[03-06,9],cpu1"), "gpu03");
  EXPECT_EQ(firstHost("cpu1,gpu[1-2]"), "cpu1");
  EXPECT_EQ(firstHost("n[1,3]"), "n1");
  EXPECT_EQ(firstHost("n[5]"), "n5");
  EXPECT_EQ(firstHost("node7"), "node7");
  EXPECT_EQ(firstHost("n[1-2]-ib[01,03]"), "n1-ib01");  // every bracket group of the first name
  EXPECT_EQ(firstHost("gpu[03-06]-ib,cpu1"), "gpu03-ib");
}

TEST(SlurmListsTest, TaskCountsRepeatWhatTheyMarkWithX) {
  EXPECT_EQ(taskCounts("SLURM_TASKS_PER_NODE", "2(x3),1"), (Ints{2, 2, 2, 1}));
  EXPECT_EQ(taskCounts("SLURM_TASKS_PER_NODE", "1,2(x2),3"), (Ints{1, 2, 2, 3}));
  EXPECT_EQ(taskCounts("SLURM_TASKS_PER_NODE", "4"), (Ints{4}));
  EXPECT_EQ(tasksOnNode("SLURM_STEP_TASKS_PER_NODE", "2(x2),1", 1), 2);
  EXPECT_EQ(tasksOnNode("SLURM_STEP_TASKS_PER_NODE", "2(x2),1", 2), 1);
}

TEST(SlurmListsTest, AMalformedTaskCountListNamesTheVariableAndItsText) {
  EXPECT_EQ(slurmListError([] { taskCounts("SLURM_TASKS_PER_NODE", "2(x3"); }),
            "environment variable SLURM_TASKS_PER_NODE='2(x3' is not a Slurm task count list like 2(x3),1");
  EXPECT_EQ(slurmListError([] { taskCounts("SLURM_TASKS_PER_NODE", ""); }),
            "environment variable SLURM_TASKS_PER_NODE='' is not a positive integer");
  EXPECT_EQ(slurmListError([] { taskCounts("SLURM_TASKS_PER_NODE", "0"); }),
            "environment variable SLURM_TASKS_PER_NODE='0' is not a positive integer");
  EXPECT_EQ(slurmListError([] { taskCounts("SLURM_TASKS_PER_NODE", "2,x"); }),
            "environment variable SLURM_TASKS_PER_NODE='x' is not a positive integer");
  EXPECT_EQ(slurmListError([] { taskCounts("SLURM_TASKS_PER_NODE", "2(x0)"); }),
            "environment variable SLURM_TASKS_PER_NODE='0' is not a positive integer");
  EXPECT_EQ(slurmListError([] { taskCounts("SLURM_TASKS_PER_NODE", "1(x2000000)"); }),
            "environment variable SLURM_TASKS_PER_NODE='1(x2000000)' lists more than 1048576 nodes");
  EXPECT_EQ(slurmListError([] { tasksOnNode("SLURM_STEP_TASKS_PER_NODE", "2(x2)", 2); }),
            "environment variable SLURM_STEP_TASKS_PER_NODE='2(x2)' lists no tasks for node 2");
}

TEST(SlurmListsTest, TaskIdsAreNonNegativeIntegersSeparatedByCommas) {
  EXPECT_EQ(taskIds("SLURM_GTIDS", "0,1,4"), (Ints{0, 1, 4}));
  EXPECT_EQ(taskIds("SLURM_GTIDS", "3"), (Ints{3}));
  EXPECT_EQ(slurmListError([] { taskIds("SLURM_GTIDS", "0,,2"); }),
            "environment variable SLURM_GTIDS='' is not a non-negative integer");
  EXPECT_EQ(slurmListError([] { taskIds("SLURM_GTIDS", "0,-1"); }),
            "environment variable SLURM_GTIDS='-1' is not a non-negative integer");
}

TEST(SlurmListsTest, BlockAndCyclicDistributionsPlaceEveryTask) {
  const Ints counts{3, 1, 2};
  EXPECT_EQ(taskNodes(counts, ""), (Ints{0, 0, 0, 1, 2, 2}));
  EXPECT_EQ(taskNodes(counts, "block"), (Ints{0, 0, 0, 1, 2, 2}));
  EXPECT_EQ(taskNodes(counts, "*"), (Ints{0, 0, 0, 1, 2, 2}));
  EXPECT_EQ(taskNodes(counts, "block:cyclic"), (Ints{0, 0, 0, 1, 2, 2}));  // only the part across nodes counts
  EXPECT_EQ(taskNodes(counts, "cyclic"), (Ints{0, 1, 2, 0, 2, 0}));
  EXPECT_EQ(taskNodes(counts, "cyclic:block"), (Ints{0, 1, 2, 0, 2, 0}));
  EXPECT_EQ(taskNodes(counts, "fcyclic"), (Ints{0, 1, 2, 0, 2, 0}));
}

TEST(SlurmListsTest, OtherDistributionsLeaveTheLayoutUnknown) {
  EXPECT_FALSE(taskNodes({2, 2}, "plane=2").has_value());
  EXPECT_FALSE(taskNodes({2, 2}, "arbitrary").has_value());
}

}  // namespace
}  // namespace strata::cli
