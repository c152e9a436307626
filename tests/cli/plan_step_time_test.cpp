// strata plan's step-time model (cli/plan/plan_step_time.cpp) on hand-made calibrations, where every term is known.
#include <gtest/gtest.h>

#include "plan/plan_step_time.h"
#include "strata/optim/parameter_store.h"

namespace strata::cli {
namespace {

// Four parameters of 1 MiB each (float32), in `units` FSDP units of equal size (0: one flat group).
ParameterStore parametersIn(int units) {
  std::vector<std::pair<std::string, Tensor>> initial;
  std::vector<int> unitOf;
  for (int i = 0; i < 4; ++i) {
    initial.emplace_back("p" + std::to_string(i), Tensor::zeros(DType::Float32, {256 * 1024}));
    unitOf.push_back(units > 0 ? i * units / 4 : 0);
  }
  return ParameterStore(initial, Device::cpu(), units > 0 ? unitOf : std::vector<int>{});
}

// Latency 1 ms, 1 GiB/s, for every collective; 100 ms of compute and 20 ms of optimizer.
CollectiveCalibration collectives() {
  CollectiveCalibration c;
  c.ranks = 4;
  c.allReduce = c.allGather = c.reduceScatter = CollectiveFit{.latencyS = 1e-3, .bytesPerS = 1024.0 * 1024 * 1024};
  return c;
}

ComputeCalibration compute() {
  return ComputeCalibration{.steps = 5, .forwardBackwardS = 0.1, .optimizerS = 0.02, .workspaceBytes = 0};
}

MemoryQuery query(const std::string& strategy, int worldSize, std::map<std::string, std::string> options = {}) {
  MemoryQuery q;
  q.strategy = strategy;
  q.worldSize = worldSize;
  q.options = std::move(options);
  return q;
}

constexpr double kMiB = 1024.0 * 1024;
constexpr double kTransferPerMiB = kMiB / (1024.0 * kMiB);  // seconds per MiB at 1 GiB/s

TEST(PlanStepTimeTest, DdpAddsOneAllReducePerBucketToTheCompute) {
  const ParameterStore parameters = parametersIn(0);
  // first_bucket_mb 1, bucket_mb 25: buckets of 1 MiB and 3 MiB.
  const StepTimePrediction p = predictStepTime(query("ddp", 2), parameters, compute(), collectives());
  EXPECT_DOUBLE_EQ(p.computeS, 0.12);
  EXPECT_NEAR(p.communicationS, 2 * 1e-3 + 4 * kTransferPerMiB, 1e-12);
}

TEST(PlanStepTimeTest, FsdpFullGathersTwiceAndReducesOncePerUnit) {
  const ParameterStore parameters = parametersIn(2);  // two units of 2 MiB
  const StepTimePrediction p =
      predictStepTime(query("fsdp", 2, {{"shard", "full"}}), parameters, compute(), collectives());
  EXPECT_DOUBLE_EQ(p.computeS, 0.1 + 0.02 / 2);
  EXPECT_NEAR(p.communicationS, 2 * 3 * (1e-3 + 2 * kTransferPerMiB), 1e-12);
  const StepTimePrediction gradOp =
      predictStepTime(query("fsdp", 2, {{"shard", "grad_op"}}), parameters, compute(), collectives());
  EXPECT_NEAR(gradOp.communicationS, 2 * 2 * (1e-3 + 2 * kTransferPerMiB), 1e-12);
}

// Note [Step time and overlap]: with ranks x threads over the cores only the latency part shrinks, by their share.
TEST(PlanStepTimeTest, OversubscribedCoresCountTheLatencyAtTheirShare) {
  EXPECT_DOUBLE_EQ(latencyShare(2, 2, 1), 1.0);
  EXPECT_DOUBLE_EQ(latencyShare(16, 2, 4), 1.0);
  EXPECT_DOUBLE_EQ(latencyShare(2, 4, 1), 0.5);
  EXPECT_DOUBLE_EQ(latencyShare(2, 2, 2), 0.5);
  const ParameterStore parameters = parametersIn(2);
  const StepTimePrediction p =
      predictStepTime(query("fsdp", 4, {{"shard", "full"}}), parameters, compute(), collectives(), 0.5);
  EXPECT_NEAR(p.communicationS, 2 * 3 * (0.5 * 1e-3 + 2 * kTransferPerMiB), 1e-12);
  EXPECT_DOUBLE_EQ(p.computeS, 0.1 + 0.02 / 4);
  EXPECT_THROW(predictStepTime(query("ddp", 2), parameters, compute(), collectives(), 0.0), Error);
}

}  // namespace
}  // namespace strata::cli
