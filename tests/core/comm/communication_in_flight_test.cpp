// Note [Giving way to communication]: collectives count as in flight from launch to completion, and the executor
// yields between nodes while one is.
#include "strata/comm/communication_in_flight.h"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "strata/comm/async_work.h"
#include "strata/error.h"
#include "strata/executor.h"
#include "thread_ranks.h"

namespace strata {
namespace {

// The yields these tests count need giving way on (the default).
bool givingWayTurnedOff() {
  const char* value = std::getenv("STRATA_GIVE_WAY");
  return value != nullptr && std::string(value) == "0";
}

TEST(CommunicationInFlightTest, AnAsyncWorkCountsFromItsLaunchUntilItCompletesOrFails) {
  const int before = communicationInFlight();
  auto completed = std::make_shared<AsyncWork>("allReduce #1");
  auto failed = std::make_shared<AsyncWork>("allGather #2");
  EXPECT_EQ(communicationInFlight(), before + 2);
  completed->markCompleted(0.5);
  EXPECT_EQ(communicationInFlight(), before + 1);
  completed->markCompleted(0.5);  // a second completion does not count twice
  EXPECT_EQ(communicationInFlight(), before + 1);
  failed->markFailed("rank 1 left");
  EXPECT_EQ(communicationInFlight(), before);
  EXPECT_THROW(failed->wait(std::chrono::seconds(1)), Error);
  {
    AsyncWork abandoned("broadcast #3");  // its group shut down before it ran
    EXPECT_EQ(communicationInFlight(), before + 1);
  }
  EXPECT_EQ(communicationInFlight(), before);
}

TEST(CommunicationInFlightTest, GivesWayOnlyWhileACollectiveIsInFlight) {
  if (givingWayTurnedOff()) {
    GTEST_SKIP() << "STRATA_GIVE_WAY=0 turns giving way off";
  }
  ASSERT_EQ(communicationInFlight(), 0);
  const long long before = communicationYields();
  EXPECT_FALSE(giveWayToCommunication());
  AsyncWork work("reduceScatter #4");
  EXPECT_TRUE(giveWayToCommunication());
  EXPECT_EQ(communicationYields(), before + 1);
  work.markCompleted();
  EXPECT_FALSE(giveWayToCommunication());
  EXPECT_EQ(communicationYields(), before + 1);
}

TEST(CommunicationInFlightTest, AGlooGroupsCollectivesAreInFlightUntilTheyComplete) {
  ASSERT_EQ(communicationInFlight(), 0);
  testing::runGlooRanks(2, [](GlooProcessGroup& pg) {
    for (std::int64_t n : {1, 1000, 100000}) {
      Tensor t = testing::filledTensor(DType::Float32, n, [](std::int64_t i) { return static_cast<double>(i); });
      std::shared_ptr<Work> work = pg.allReduce(t, ReduceOp::Sum);
      EXPECT_GE(communicationInFlight(), work->isCompleted() ? 0 : 1);
      work->wait(std::chrono::seconds(30));
    }
    pg.barrier()->wait(std::chrono::seconds(30));
  });
  EXPECT_EQ(communicationInFlight(), 0);  // every collective ended its count, on both ranks
}

// y = Relu(Relu(x)): two nodes.
Program twoNodeProgram() {
  const TensorMeta meta{DType::Float32, {4}};
  Program program;
  program.values.push_back(ProgramValue{"x", meta, Tensor(), Tensor(), true, false});
  program.values.push_back(ProgramValue{"h", meta, Tensor(), Tensor(), false, false});
  program.values.push_back(ProgramValue{"y", meta, Tensor(), Tensor(), false, false});
  program.inputs = {0};
  program.outputs = {2};
  const KernelFactory& relu = *OpRegistry::instance().kernel("Relu", DeviceType::CPU);
  for (int output : {1, 2}) {
    ProgramStep step;
    step.nodeName = "relu" + std::to_string(output);
    step.opType = "Relu";
    step.inputs = {output - 1};
    step.outputs = {output};
    step.kernel = relu(KernelInit{{InputInfo{true, meta, nullptr}}, {meta}, Attributes(), step.nodeName, false});
    program.steps.push_back(std::move(step));
  }
  return program;
}

TEST(CommunicationInFlightTest, TheExecutorGivesWayBeforeEachNodeWhileACollectiveIsInFlight) {
  if (givingWayTurnedOff()) {
    GTEST_SKIP() << "STRATA_GIVE_WAY=0 turns giving way off";
  }
  ASSERT_EQ(communicationInFlight(), 0);
  Executor executor(twoNodeProgram());
  const Tensor x = Tensor::zeros(DType::Float32, {4});
  const long long before = communicationYields();
  executor.run({x});
  EXPECT_EQ(communicationYields(), before);  // nothing in flight: no yields
  AsyncWork prefetch("allGather #5");
  executor.run({x});
  EXPECT_EQ(communicationYields(), before + 2);
  prefetch.markCompleted();
}

}  // namespace
}  // namespace strata
