#include "strata/train/trainer.h"

#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "strata/allocator.h"
#include "strata/comm/in_memory_store.h"
#include "trainer_fixtures.h"

namespace strata {
namespace {

using testing::KeptRecords;
using testing::MemoryCheckpoints;
using testing::RowBatches;

using testing::loadStrategy;
using testing::parametersOf;

void expectNear(const std::vector<float>& actual, const std::vector<float>& expected, double tolerance,
                const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tolerance * (1.0 + std::abs(expected[i]))) << what << " at " << i;
  }
}

TrainerOptions sgdOptions(std::int64_t epochs, int micro = 1) {
  TrainerOptions options;
  options.epochs = epochs;
  options.microBatches = micro;
  options.logEvery = 2;
  options.schedule.kind = LrScheduleKind::Constant;
  options.schedule.baseLr = 0.1;
  options.optimizer.kind = OptimizerKind::Sgd;
  options.optimizer.momentum = 0.9;
  return options;
}

class TrainerTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
  std::pair<Tensor, Tensor> train_ = testing::separableRows(64, 1);
  std::pair<Tensor, Tensor> test_ = testing::separableRows(32, 2);
};

TEST_F(TrainerTest, RunsEpochsLogsEvaluatesAndReportsFigures) {
  TrainingPlan plan = testing::mlpPlan(dir_, 8);
  const std::vector<float> before = parametersOf(plan);
  RowBatches train(train_.first, train_.second, 8);
  RowBatches test(test_.first, test_.second, 8);
  auto strategy = loadStrategy("single");
  KeptRecords records;
  Trainer trainer(
      TrainerParts{.program = plan, .train = train, .test = &test, .strategy = *strategy, .recorder = records},
      sgdOptions(3));
  const RunTotals totals = trainer.run();
  EXPECT_EQ(trainer.stepsPerEpoch(), 8);
  EXPECT_EQ(totals.steps, 24);
  EXPECT_EQ(totals.globalBatchSize, 8);
  ASSERT_EQ(records.epochs.size(), 3u);
  ASSERT_EQ(records.steps.size(), 12u);  // every second step
  EXPECT_EQ(records.steps.back().step, 24);
  for (const StepRecord& step : records.steps) {
    EXPECT_TRUE(std::isfinite(step.loss));
    EXPECT_GE(step.accuracy, 0.0);
    EXPECT_LE(step.accuracy, 1.0);
  }
  // The MLP learns the separable classes: the loss falls and the test accuracy is a real fraction of 32 samples.
  EXPECT_LT(records.epochs.back().trainLoss, records.epochs.front().trainLoss);
  const double correct = records.epochs.back().testAccuracy * 32;
  EXPECT_NEAR(correct, std::round(correct), 1e-9);
  EXPECT_GT(records.epochs.back().testAccuracy, 0.5);
  EXPECT_TRUE(records.finished);
  EXPECT_DOUBLE_EQ(totals.finalTrainLoss, records.steps.back().loss);
  EXPECT_GT(records.figures.computeS, 0.0);
  EXPECT_NE(parametersOf(plan), before);
}

// Note [Accumulation in place]: K micro-batches of B rows, each backward adding its gradients (seeded with 1/K)
// into the gradient buffers, give the gradients of one batch of K x B rows: no copy of the gradients is kept.
TEST_F(TrainerTest, AccumulatedMicroBatchesEqualOneBatchOfTheirRows) {
  TrainingPlan whole = testing::mlpPlan(dir_, 8);
  TrainingPlan split = testing::mlpPlan(dir_, 4);
  auto single = loadStrategy("single");
  auto other = loadStrategy("single");
  RowBatches wholeBatches(train_.first, train_.second, 8);
  RowBatches splitBatches(train_.first, train_.second, 4);
  KeptRecords wholeRecords, splitRecords;
  Trainer(TrainerParts{.program = whole, .train = wholeBatches, .strategy = *single, .recorder = wholeRecords},
          sgdOptions(2))
      .run();
  const std::int64_t parameterBytes = whole.parameters().totalElements() * 4;
  Allocator& cpu = allocatorFor(Device::cpu());
  cpu.stats().resetPeaks();
  const std::int64_t gradientsBefore =
      cpu.stats().snapshot().current[static_cast<std::size_t>(MemoryCategory::Gradients)];
  Trainer(TrainerParts{.program = split, .train = splitBatches, .strategy = *other, .recorder = splitRecords},
          sgdOptions(2, 2))
      .run();
  expectNear(parametersOf(split), parametersOf(whole), 1e-5, "accumulated vs whole batch");
  ASSERT_EQ(splitRecords.steps.size(), wholeRecords.steps.size());
  EXPECT_NEAR(splitRecords.steps.back().loss, wholeRecords.steps.back().loss, 1e-5);
  // At most one parameter's gradient beside the buffers (the fc1 weight, 128 floats), never a second full set.
  const std::int64_t gradientPeak = cpu.stats().snapshot().peak[static_cast<std::size_t>(MemoryCategory::Gradients)];
  EXPECT_LE(gradientPeak - gradientsBefore, 16 * testing::kFeatures * 4) << "of " << parameterBytes << " bytes";
}

TEST_F(TrainerTest, ResumedRunMatchesAnUninterruptedOne) {
  TrainingPlan full = testing::mlpPlan(dir_, 8);
  TrainingPlan part = testing::mlpPlan(dir_, 8);
  TrainingPlan resumed = testing::mlpPlan(dir_, 8);
  RowBatches batches(train_.first, train_.second, 8);
  MemoryCheckpoints checkpoints;
  KeptRecords records;
  {
    auto strategy = loadStrategy("single");
    Trainer(TrainerParts{.program = full, .train = batches, .strategy = *strategy, .recorder = records}, sgdOptions(2))
        .run();
  }
  {
    auto strategy = loadStrategy("single");
    TrainerOptions options = sgdOptions(2);
    options.stopAfterEpoch = 1;
    options.saveEachEpoch = true;
    Trainer(
        TrainerParts{
            .program = part, .train = batches, .strategy = *strategy, .recorder = records, .checkpoints = &checkpoints},
        options)
        .run();
  }
  auto strategy = loadStrategy("single");
  TrainerOptions options = sgdOptions(2);
  options.resume = true;
  Trainer trainer(TrainerParts{.program = resumed,
                               .train = batches,
                               .strategy = *strategy,
                               .recorder = records,
                               .checkpoints = &checkpoints},
                  options);
  EXPECT_EQ(trainer.startEpoch(), 1);
  EXPECT_EQ(trainer.stepsDone(), 8);
  EXPECT_EQ(trainer.run().steps, 16);
  EXPECT_EQ(parametersOf(resumed), parametersOf(full));  // momentum restored too: bit for bit
}

// Note [Rejoining workers]: only a strategy that can take a restarted rank back gets one (the ps plugin's sync mode,
// tests/multirank/check_ps_worker_restart.py); the others refuse it by name instead of training from step 0.
TEST_F(TrainerTest, ARestartedRankNeedsAStrategyThatTakesItBack) {
  TrainingPlan plan = testing::mlpPlan(dir_, 8);
  RowBatches batches(train_.first, train_.second, 8);
  KeptRecords records;
  auto strategy = loadStrategy("single");
  TrainerOptions options = sgdOptions(1);
  options.rejoin = true;
  try {
    Trainer(TrainerParts{.program = plan, .train = batches, .strategy = *strategy, .recorder = records}, options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("strategy 'single'"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("failed in rejoin: this strategy cannot take a restarted worker back"));
  }
}

TEST_F(TrainerTest, ALossThatIsNotFiniteNamesItsStep) {
  TrainingPlan plan = testing::mlpPlan(dir_, 8);
  RowBatches batches(train_.first, train_.second, 8);
  auto strategy = loadStrategy("single");
  KeptRecords records;
  TrainerOptions options = sgdOptions(1);
  options.schedule.baseLr = 1e30;
  try {
    Trainer(TrainerParts{.program = plan, .train = batches, .strategy = *strategy, .recorder = records}, options).run();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("the loss became"), std::string::npos) << message;
    EXPECT_NE(message.find("step 1"), std::string::npos) << message;  // step 0 trains, step 1 sees the blow-up
  }
}

// DDP with ranks as threads over one in-memory store (Gloo's base_test.h style): 2 ranks of B rows train like one
// process on the 2B rows of both, and the lead's logged loss is the mean over the ranks.
TEST_F(TrainerTest, DdpThreadRanksEqualOneProcessOnTheConcatenatedBatch) {
  TrainingPlan whole = testing::mlpPlan(dir_, 8);
  RowBatches wholeBatches(train_.first, train_.second, 8);
  KeptRecords wholeRecords;
  auto single = loadStrategy("single");
  Trainer(TrainerParts{.program = whole, .train = wholeBatches, .strategy = *single, .recorder = wholeRecords},
          sgdOptions(2))
      .run();

  constexpr int kWorld = 2;
  const std::vector<testing::RankOutcome> ranks = testing::trainThreadRanks(
      dir_, kWorld, "ddp", {{"bucket_mb", "0.0002"}}, sgdOptions(2), train_, 4);  // several buckets
  std::vector<KeptRecords> records;
  for (int r = 0; r < kWorld; ++r) {
    expectNear(ranks[r].parameters, parametersOf(whole), 1e-5, "rank " + std::to_string(r));
    records.push_back(ranks[r].records);
    EXPECT_TRUE(records[r].finished);
    EXPECT_GT(records[r].figures.strategyFigures["communication_s"], 0.0);
  }
  ASSERT_EQ(records[0].steps.size(), wholeRecords.steps.size());
  EXPECT_TRUE(records[1].steps.empty());  // only the lead records
  for (std::size_t i = 0; i < wholeRecords.steps.size(); ++i) {
    EXPECT_NEAR(records[0].steps[i].loss, wholeRecords.steps[i].loss, 1e-5) << "logged step " << i;
  }
}

// A rank whose figures never come ends the run on the lead rank with every missing rank named and what the
// heartbeats say of them (a rank waiting for a stopped one writes nothing either).
TEST_F(TrainerTest, MissingFiguresNameEveryMissingRankAndTheSilentOnes) {
  TrainingPlan plan = testing::mlpPlan(dir_, 8);
  RowBatches batches(train_.first, train_.second, 8);
  KeptRecords records;
  auto single = loadStrategy("single");
  InMemoryStore store;
  store.setString("trainer/log/2/2", "0,0,0");  // rank 2 wrote its figures; ranks 1 and 3 never do
  TrainerOptions options = sgdOptions(1);
  options.timeout = std::chrono::milliseconds(300);
  Trainer trainer(TrainerParts{.program = plan,
                               .train = batches,
                               .strategy = *single,
                               .recorder = records,
                               .store = &store,
                               .place = RankPlace{0, 4, 0, 1},
                               .describeSilentRanks = [] { return std::string("rank 3 of 4 is silent (test)"); }},
                  options);
  try {
    trainer.run();
    FAIL() << "the run ended although ranks 1 and 3 never wrote their figures";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("ranks 1, 3 of 4 did not write 'trainer/log/2/<rank>' within 0.3 s "
                                               "(and have not departed); rank 3 of 4 is silent (test)"));
  }
}

}  // namespace
}  // namespace strata
