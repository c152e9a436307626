// FSDP (plugins/fsdp) with ranks as threads: every sharding level trains like one process on the concatenated
// batch, whatever the padding, accumulation or optimizer; checkpoints reshard to another world size.
#include <cmath>
#include <tuple>

#include <gtest/gtest.h>

#include "core/train/trainer_fixtures.h"

namespace strata {
namespace {

using testing::KeptRecords;
using testing::RowBatches;

constexpr std::int64_t kRowsPerStep = 12;

void expectNear(const std::vector<float>& actual, const std::vector<float>& expected, double tolerance,
                const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tolerance * (1.0 + std::abs(expected[i]))) << what << " at " << i;
  }
}

TrainerOptions optionsFor(OptimizerKind kind, std::int64_t steps, int micro) {
  TrainerOptions options;
  options.maxSteps = steps;
  options.microBatches = micro;
  options.logEvery = 1;
  options.schedule.kind = LrScheduleKind::Constant;
  options.schedule.baseLr = kind == OptimizerKind::Sgd ? 0.1 : 0.01;
  options.optimizer.kind = kind;
  options.optimizer.momentum = 0.9;
  options.optimizer.weightDecay = 1e-3;
  return options;
}

// One process, one batch of kRowsPerStep rows per step: what every data-parallel run must reproduce.
std::vector<float> referenceRun(const testing::TempDir& dir, const std::pair<Tensor, Tensor>& rows,
                                TrainerOptions options, std::vector<double>* losses = nullptr) {
  TrainingPlan plan = testing::mlpPlan(dir, kRowsPerStep);
  RowBatches batches(rows.first, rows.second, kRowsPerStep);
  auto single = testing::loadStrategy("single");
  KeptRecords records;
  options.microBatches = 1;
  Trainer(TrainerParts{.program = plan, .train = batches, .strategy = *single, .recorder = records}, options).run();
  if (losses != nullptr) {
    for (const StepRecord& step : records.steps) {
      losses->push_back(step.loss);
    }
  }
  return testing::parametersOf(plan);
}

struct Case {
  std::string shard;
  int world;
  int micro;
  std::string accumulate;
  OptimizerKind optimizer;
};

std::string describe(const Case& c) {
  return fmt::format("{}_ranks{}_micro{}_{}_{}", c.shard, c.world, c.micro, c.accumulate,
                     c.optimizer == OptimizerKind::Sgd ? "sgd" : "adam");
}

std::string nameOf(const ::testing::TestParamInfo<Case>& info) {
  return describe(info.param);
}

void PrintTo(const Case& c, std::ostream* out) {
  *out << describe(c);
}

class FsdpLevelTest : public ::testing::TestWithParam<Case> {
 protected:
  testing::TempDir dir_;
  std::pair<Tensor, Tensor> rows_ = testing::separableRows(64, 5);
};

// Units by module: fc1 (144 elements) and fc2 (68); 3 ranks pad both, 2 ranks neither.
TEST_P(FsdpLevelTest, TrainsLikeOneProcessOnTheConcatenatedBatch) {
  const Case& c = GetParam();
  std::vector<double> losses;
  const std::vector<float> expected = referenceRun(dir_, rows_, optionsFor(c.optimizer, 5, 1), &losses);
  const std::vector<testing::RankOutcome> ranks = testing::trainThreadRanks(
      dir_, c.world, "fsdp", {{"shard", c.shard}, {"accumulate", c.accumulate}, {"units", "module"}},
      optionsFor(c.optimizer, 5, c.micro), rows_, kRowsPerStep / (c.world * c.micro));
  for (int r = 0; r < c.world; ++r) {
    expectNear(ranks[r].parameters, expected, 1e-5, "rank " + std::to_string(r));
    EXPECT_TRUE(ranks[r].records.finished);
  }
  ASSERT_EQ(ranks[0].records.steps.size(), losses.size());
  for (std::size_t s = 0; s < losses.size(); ++s) {
    EXPECT_NEAR(ranks[0].records.steps[s].loss, losses[s], 1e-5) << "step " << s;
  }
  const auto& figures = ranks[0].records.figures.strategyFigures;
  if (c.shard == "none") {
    EXPECT_GT(figures.at("all_reduce_s"), 0.0);
  } else {
    EXPECT_GT(figures.at("all_gather_s"), 0.0);
    EXPECT_GT(figures.at("reduce_scatter_s"), 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, FsdpLevelTest,
                         ::testing::Values(Case{"full", 2, 1, "local", OptimizerKind::Sgd},
                                           Case{"full", 3, 1, "local", OptimizerKind::Sgd},
                                           Case{"full", 3, 1, "local", OptimizerKind::Adam},
                                           Case{"full", 2, 2, "local", OptimizerKind::Sgd},
                                           Case{"full", 3, 2, "sharded", OptimizerKind::Adam},
                                           Case{"grad_op", 3, 1, "local", OptimizerKind::Sgd},
                                           Case{"grad_op", 2, 2, "sharded", OptimizerKind::Sgd},
                                           Case{"grad_op", 3, 1, "local", OptimizerKind::Adam},
                                           Case{"none", 3, 1, "local", OptimizerKind::Sgd},
                                           Case{"none", 2, 2, "local", OptimizerKind::Adam}),
                         nameOf);

// A run sharded over 3 ranks for one epoch, resumed on 2, ends where one process ends after both epochs: the
// parameter shards and Adam's moments are reassembled and cut again.
TEST(FsdpStateTest, ACheckpointOfThreeRanksResumesOnTwo) {
  testing::TempDir dir;
  const auto rows = testing::separableRows(48, 9);  // 4 steps of 12 rows per epoch
  TrainerOptions options = optionsFor(OptimizerKind::Adam, 0, 1);
  options.epochs = 2;
  const std::vector<float> expected = referenceRun(dir, rows, options);

  testing::MemoryCheckpoints checkpoints;
  TrainerOptions first = options;
  first.stopAfterEpoch = 1;
  first.saveEachEpoch = true;
  testing::trainThreadRanks(dir, 3, "fsdp", {{"shard", "full"}, {"unit_params", "100"}}, first, rows, 4, &checkpoints);
  TrainerOptions second = options;
  second.resume = true;
  const std::vector<testing::RankOutcome> ranks = testing::trainThreadRanks(
      dir, 2, "fsdp", {{"shard", "full"}, {"unit_params", "100"}}, second, rows, 6, &checkpoints);
  for (int r = 0; r < 2; ++r) {
    expectNear(ranks[r].parameters, expected, 1e-5, "rank " + std::to_string(r));
  }
}

// shard=hybrid on 2 nodes x 2 thread ranks (sharded within a node, replicated across): one process's result.
// With one rank per node nothing is sharded, and it is DDP.
TEST(FsdpHybridTest, TwoNodesTrainLikeOneProcess) {
  testing::TempDir dir;
  const auto rows = testing::separableRows(48, 4);
  for (const auto& [world, micro, accumulate, kind] :
       {std::tuple{4, 1, "local", OptimizerKind::Adam}, std::tuple{4, 3, "sharded", OptimizerKind::Sgd},
        std::tuple{2, 1, "local", OptimizerKind::Sgd}}) {
    const std::vector<float> expected = referenceRun(dir, rows, optionsFor(kind, 4, 1));
    const std::vector<testing::RankOutcome> ranks = testing::trainThreadRanks(
        dir, world, "fsdp", {{"shard", "hybrid"}, {"units", "module"}, {"accumulate", accumulate}},
        optionsFor(kind, 4, micro), rows, kRowsPerStep / (world * micro), nullptr, 2);
    for (int r = 0; r < world; ++r) {
      expectNear(ranks[r].parameters, expected, 1e-5, fmt::format("{} ranks, rank {}", world, r));
    }
    if (world == 4) {
      EXPECT_GT(ranks[0].records.figures.strategyFigures.at("reduce_scatter_s"), 0.0);
      EXPECT_GT(ranks[0].records.figures.strategyFigures.at("all_reduce_s"), 0.0);  // across the nodes
    }
  }
}

// Note [16-bit collectives]: reduce_dtype=bf16|fp16 gathers bf16/fp16-rounded weights and reduces gradients in 16
// bits, so the result leaves one process's by about 16-bit rounding, not more: closer than 5e-3, yet not equal.
TEST(FsdpReduceDtypeTest, SixteenBitCollectivesStayNearOneProcess) {
  testing::TempDir dir;
  const auto rows = testing::separableRows(48, 6);
  const TrainerOptions options = optionsFor(OptimizerKind::Sgd, 4, 1);
  const std::vector<float> expected = referenceRun(dir, rows, options);
  for (const char* shard : {"full", "grad_op", "none"}) {
    for (const char* dtype : {"bf16", "fp16"}) {
      const std::vector<testing::RankOutcome> ranks = testing::trainThreadRanks(
          dir, 3, "fsdp", {{"shard", shard}, {"units", "module"}, {"reduce_dtype", dtype}}, options, rows, 4);
      double worst = 0;
      for (std::size_t i = 0; i < expected.size(); ++i) {
        worst = std::max(
            worst, std::abs(static_cast<double>(ranks[0].parameters[i]) - expected[i]) / (1.0 + std::abs(expected[i])));
      }
      EXPECT_LT(worst, 5e-3) << shard << " " << dtype;
      EXPECT_GT(worst, 0.0) << shard << " " << dtype << ": no 16-bit rounding shows, so 16 bits were not used";
      for (int r = 1; r < 3; ++r) {
        EXPECT_EQ(ranks[r].parameters, ranks[0].parameters) << shard << " " << dtype << ": ranks differ";
      }
    }
  }
}

// Note [Sharded optimizers]: gradient clipping on shards uses the norm over every rank's shard, so it clips exactly
// as one process clipping the whole gradient does (a norm of the local shard alone would clip differently).
TEST(FsdpShardedOptimizerTest, ClipsByTheGlobalNorm) {
  testing::TempDir dir;
  const auto rows = testing::separableRows(48, 8);
  for (const auto& [shard, world, kind] :
       {std::tuple{"full", 3, OptimizerKind::Adam}, std::tuple{"grad_op", 2, OptimizerKind::Sgd}}) {
    TrainerOptions options = optionsFor(kind, 4, 1);
    options.optimizer.maxGradNorm = 0.05;  // below the gradients' norm: every step clips
    const std::vector<float> expected = referenceRun(dir, rows, options);
    const std::vector<testing::RankOutcome> ranks = testing::trainThreadRanks(
        dir, world, "fsdp", {{"shard", shard}, {"units", "module"}}, options, rows, kRowsPerStep / world);
    for (int r = 0; r < world; ++r) {
      expectNear(ranks[r].parameters, expected, 1e-5, fmt::format("{} on {} ranks, rank {}", shard, world, r));
    }
  }
}

// Note [Offload on the CPU]: offloading to host memory on the CPU backend changes nothing, and the run says so.
TEST(FsdpOffloadTest, IsANoOpOnTheCpuThatTheSummaryRecords) {
  testing::TempDir dir;
  const auto rows = testing::separableRows(48, 3);
  const TrainerOptions options = optionsFor(OptimizerKind::Adam, 3, 1);
  const std::vector<float> expected = referenceRun(dir, rows, options);
  for (const char* offload : {"optimizer", "params"}) {
    const std::vector<testing::RankOutcome> ranks = testing::trainThreadRanks(
        dir, 2, "fsdp", {{"shard", "full"}, {"units", "module"}, {"offload", offload}}, options, rows, 6);
    for (int r = 0; r < 2; ++r) {
      expectNear(ranks[r].parameters, expected, 1e-5, std::string(offload) + ", rank " + std::to_string(r));
      EXPECT_EQ(ranks[r].records.figures.strategyFigures.at("fsdp_offload_noop"), 1.0) << offload;
    }
  }
}

TEST(FsdpOptionsTest, BadOptionsSayWhatIsKnown) {
  auto strategy = testing::loadStrategy("fsdp");
  const auto message = [&](std::map<std::string, std::string> options) {
    try {
      strategy->requirements(StrategyQuery{std::move(options), 2, 1});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"shard", "ful"}}).find("unknown --strategy-opt shard=ful (known: full, grad_op, none, hybrid)"),
            std::string::npos);
  EXPECT_NE(message({{"unit_params", "0"}}).find("unit_params=0 must be a positive integer"), std::string::npos);
  EXPECT_NE(message({{"small_module_params", "-1"}}).find("small_module_params=-1 must be a non-negative integer"),
            std::string::npos);
  EXPECT_EQ(message({{"small_module_params", "0"}}), "no error");
  // Small modules join the unit before them by default (Note [Small modules]); 0 gives one unit per module.
  const StrategyRequirements merged = strategy->requirements(StrategyQuery{{}, 2, 1});
  EXPECT_EQ(merged.units.kind, UnitPartition::Kind::ByModule);
  EXPECT_EQ(merged.units.smallModule, 262144);
  EXPECT_EQ(strategy->requirements(StrategyQuery{{{"small_module_params", "0"}}, 2, 1}).units.smallModule, 0);
  EXPECT_NE(message({{"shard", "hybrid"}})
                .find("shard=hybrid shards within a node and replicates across nodes, so "
                      "it needs --nnodes 2 or more"),
            std::string::npos);
  const auto hybridMessage = [&](std::map<std::string, std::string> options, int world, int nodes) {
    try {
      strategy->requirements(StrategyQuery{std::move(options), world, nodes});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(hybridMessage({{"shard", "hybrid"}}, 4, 2), "no error");
  EXPECT_NE(hybridMessage({{"shard", "hybrid"}}, 5, 2).find("the same ranks on every node"), std::string::npos);
  EXPECT_NE(hybridMessage({{"shard", "hybrid"}, {"accumulate", "sharded"}}, 2, 2).find("use accumulate=local"),
            std::string::npos);
  EXPECT_NE(message({{"reduce_dtype", "int8"}}).find("reduce_dtype=int8 (known: fp32, bf16, fp16)"), std::string::npos);
  EXPECT_NE(message({{"offload", "disk"}}).find("offload=disk (known: none, optimizer, params)"), std::string::npos);
  EXPECT_NE(
      message({{"offload", "params"}, {"shard", "none"}}).find("offload=params needs shard=full or shard=grad_op"),
      std::string::npos);
  EXPECT_NE(message({{"accumulate", "sharded"}, {"shard", "none"}}).find("accumulate=sharded needs shard=full"),
            std::string::npos);
  EXPECT_NE(message({{"bucket_mb", "4"}}).find("unknown --strategy-opt 'bucket_mb'"), std::string::npos);
  EXPECT_NE(message({{"units", "layer"}}).find("units=layer (known: size, module)"), std::string::npos);
}

}  // namespace
}  // namespace strata
