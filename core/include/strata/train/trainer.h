#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "strata/comm/process_group.h"
#include "strata/comm/store.h"
#include "strata/optim/loss_scaler.h"
#include "strata/optim/lr_schedule.h"
#include "strata/optim/optimizer.h"
#include "strata/plugin_host.h"
#include "strata/train/batch_source.h"
#include "strata/train/checkpoint_store.h"
#include "strata/train/metric.h"
#include "strata/train/run_recorder.h"
#include "strata/train/trainable_program.h"
#include "strata/train/trainer_context.h"

namespace strata {

struct TrainerOptions {
  std::int64_t epochs = 1;
  std::int64_t stopAfterEpoch = 0;  // > 0: stop after this epoch, keeping the schedule of `epochs`
  std::int64_t maxSteps = 0;        // > 0: overrides epochs
  int microBatches = 1;             // gradient accumulation
  std::int64_t logEvery = 20;
  LrScheduleOptions schedule;  // totalSteps (cosine) and stepSize (step: 30 epochs) are filled in when 0
  OptimizerOptions optimizer;
  Accumulation accumulation = Accumulation::InPlace;  // the strategy's requirements().accumulation
  bool sharedSteps = false;                           // the strategy's requirements().sharedSteps
  std::map<std::string, std::string> strategyOptions;
  bool saveEachEpoch = false;
  // > 0: also a checkpoint every this many steps within an epoch (Note [Checkpoints within an epoch]).
  std::int64_t saveEverySteps = 0;
  bool resume = false;
  // This rank was started again after it died (--max-restarts; Note [Rejoining workers]): the strategy's rejoin()
  // instead of setup() and of any checkpoint, then training from the step it returns, in the middle of its epoch.
  bool rejoin = false;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // --slow-rank R:F, a straggler simulation: rank R's forward and backward take F times as long (it sleeps for
  // F - 1 times what they took), so strategies can be compared with one slow worker on one machine.
  int slowRank = -1;
  double slowFactor = 1.0;
};

// What a Trainer runs with; references must outlive it. The strategy has been asked for its requirements and the
// program built accordingly (units).
struct TrainerParts {
  TrainableProgram& program;
  BatchSource& train;
  BatchSource* test = nullptr;  // this rank's share of the test split; nullptr: no evaluation
  LoadedStrategy& strategy;
  RunRecorder& recorder;
  CheckpointStore* checkpoints = nullptr;  // needed by saveEachEpoch and resume
  ProcessGroup* group = nullptr;           // nullptr in a single-process run
  Store* store = nullptr;                  // nullptr in a single-process run
  LossScaler* lossScaler = nullptr;        // fp16 dynamic loss scaling
  RankPlace place{};
  // What the data teaches (Note [Tasks]), which decides the metric, and the model's classes (or vocabulary).
  Task task = Task::Classification;
  std::int64_t classes = 0;
  SubgroupFactory subgroups = nullptr;  // none: StrategyContext::subgroup answers nullptr
  // "rank 2 of 4 is silent (...)" from the job's heartbeats (describeSilentRanks), for the lead rank's errors when
  // a rank's figures never come; none: the error names the ranks that did not write them, and no more.
  std::function<std::string()> describeSilentRanks = nullptr;
};

// Runs training: epochs of optimizer steps over micro-batches, the strategy's hooks around forward, backward and
// step, evaluation and checkpoints through the strategy, figures to a RunRecorder. Every rank of a job runs one.
//
// Note [Reading the loss]: the loss of every micro-batch stays on the device until the next logged step, when all
// of them are read at once (one synchronisation per log interval, not per micro-batch); a loss that is not finite
// is reported then, naming the step where it first appeared. Logged figures are averaged over the ranks through
// the store (the lead rank collects them), so no collective of the trainer interleaves with the strategy's.
class Trainer {
 public:
  // Sets the strategy up and, with options.resume, restores the last checkpoint.
  Trainer(TrainerParts parts, TrainerOptions options);
  // Tears the strategy down (also when an error unwinds the stack): after run() and withFullWeights().
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  RunTotals run();
  // Runs fn on every rank while every rank holds the full weights (the strategy's beforeEvaluate/afterEvaluate):
  // for export.
  void withFullWeights(const std::function<void()>& fn);

  std::int64_t stepsPerEpoch() const { return stepsPerEpoch_; }
  std::int64_t totalSteps() const { return totalSteps_; }
  std::int64_t startEpoch() const { return startEpoch_; }
  std::int64_t stepsDone() const { return step_; }
  TrainerContext& context() { return *context_; }

 private:
  struct LogWindow;
  struct EpochPass;
  void trainEpoch(std::int64_t epoch, double& epochLossSum, std::int64_t& epochLossCount,
                  std::vector<double>& epochMetricSums);
  // The parts of one epoch's step: whether this rank takes another step (Note [Shared steps]), the step's
  // micro-batches and update (returns its seconds), its record, and the log point that reads the window's losses.
  bool claimStep(EpochPass& pass);
  double trainStep(EpochPass& pass, bool logged, double lr);
  StepRecord stepRecord(const EpochPass& pass, double lr, double stepSeconds) const;
  void closeLogWindow(EpochPass& pass, StepRecord& record, bool recordIt);
  MetricFigures evaluate(std::int64_t epoch);
  void saveCheckpoint(std::int64_t epochsDone);
  void restoreCheckpoint();
  void checkParameterLayouts(const std::vector<std::string>& saved) const;
  void rejoin();
  // Sums `values` over the ranks through the store under `key` (the lead rank gets the sums; the others get their
  // own values back).
  std::vector<double> sumOverRanks(const std::string& key, const std::vector<double>& values);
  // Throws naming every rank whose figures under `key` are missing, and the silent ones among them.
  [[noreturn]] void failWaitingForFigures(const std::string& key);
  bool lead() const { return parts_.place.rank == 0; }

  TrainerParts parts_;
  TrainerOptions options_;
  std::unique_ptr<TrainerContext> context_;
  std::unique_ptr<Metric> trainMetric_;  // the logged steps' batches (Note [Metrics])
  std::unique_ptr<Metric> testMetric_;   // the test split
  bool setUp_ = false;
  std::int64_t stepsPerEpoch_ = 0;
  std::int64_t epochs_ = 0;
  std::int64_t totalSteps_ = 0;
  std::int64_t startEpoch_ = 0;
  std::int64_t step_ = 0;
  std::int64_t rejoinSkip_ = 0;  // steps of the first epoch a rejoining rank does not take (the job took them)
  bool epochCutShort_ = false;   // the last epoch ended before its last batch (--max-steps)
  double computeSeconds_ = 0;
  double lastLoss_ = NAN;      // until the first log point reads the losses
  double bytesAtLastLog_ = 0;  // the strategy's gradient_bytes_sent at the last log point
  std::int64_t stepAtLastLog_ = 0;
  std::vector<Tensor> pendingLosses_;  // this log window's micro-batch losses, still on the device
  MemorySnapshot trainingPeaks_;       // the most each category held during training steps
  MemorySnapshot runPeaks_;            // ... during the whole run
};

}  // namespace strata
