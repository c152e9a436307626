#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "strata/memory_stats.h"
#include "strata/train/metric.h"

namespace strata {

// Figures of a logged step: loss and accuracy are means over every rank and over the steps since the last log.
struct StepRecord {
  std::int64_t epoch = 0;
  std::int64_t step = 0;  // optimizer steps done
  std::int64_t stepsInEpoch = 0;
  std::int64_t stepInEpoch = 0;
  double loss = 0;
  double accuracy = -1;   // of the logged step's batches; < 0 when the labels are not classes
  MetricFigures figures;  // the task's figures of the logged step's batches (Note [Metrics])
  double lr = 0;
  double samplesPerS = 0;
  double stepTimeMs = 0;
  double etaS = 0;
  // This rank's gradient bytes handed to collectives per step since the last log point; < 0 when the strategy
  // counts none (docs/compression.md).
  double gradientBytesPerStep = -1;
};

struct EpochRecord {
  std::int64_t epoch = 0;
  std::int64_t step = 0;
  double trainLoss = 0;        // mean over the epoch's steps and every rank
  double trainAccuracy = -1;   // over the logged steps' batches of every rank; < 0 without classes
  double testAccuracy = -1;    // over the whole test split, every rank evaluating its share; < 0 without classes
  MetricFigures trainFigures;  // the task's figures over the logged steps' batches (Note [Metrics])
  MetricFigures testFigures;   // ... over the whole test split; empty without one
  double epochTimeS = 0;
};

// This rank's figures at the end of the run.
struct RankFigures {
  int rank = 0;
  double computeS = 0;
  std::map<std::string, double> strategyFigures;  // StrategyContext::addFigure
  MemorySnapshot memory;                          // peaks over the whole run, evaluation included
  MemorySnapshot trainingMemory;  // peaks over the training steps only (evaluation gathers full weights)
};

struct RunTotals {
  std::int64_t epochs = 0;
  std::int64_t steps = 0;
  std::int64_t globalBatchSize = 0;
  double trainTimeS = 0;
  double samplesPerS = 0;
  double finalTrainLoss = 0;
  double testAccuracy = -1;
  MetricFigures testFigures;
};

// Where a run's figures go (metrics.jsonl and summary.json in `strata train`). Only the lead rank (0) gets
// step() and epoch(); every rank gets finish() with its own figures.
class RunRecorder {
 public:
  virtual ~RunRecorder() = default;
  virtual void started(std::int64_t /*epoch*/) {}
  // Every step on the lead rank (a progress line; the loss is the last logged one).
  virtual void progress(const StepRecord& /*record*/) {}
  // Every rank, after each optimizer step (`step` steps done).
  virtual void stepDone(std::int64_t /*step*/) {}
  virtual void step(const StepRecord& record) = 0;
  virtual void epoch(const EpochRecord& record) = 0;
  virtual void finish(const RunTotals& totals, const RankFigures& mine) = 0;
};

}  // namespace strata
