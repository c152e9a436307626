#include "strata/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "strata/comm/departures.h"
#include "strata/comm/step_label.h"
#include "strata/error.h"
#include "strata/optim/optimizer_options_text.h"

namespace strata {
namespace {

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

double hostScalar(const Tensor& deviceTensor) {
  const Tensor t = deviceTensor.to(Device::cpu());
  return t.dtype() == DType::Float64 ? *t.data<double>() : static_cast<double>(*t.data<float>());
}

// Raises every peak of `into` to at least the one in `from`.
void mergePeaks(MemorySnapshot& into, const MemorySnapshot& from) {
  for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
    into.peak[c] = std::max(into.peak[c], from.peak[c]);
  }
  if (from.totalPeak > into.totalPeak) {
    into.totalPeak = from.totalPeak;
    into.atTotalPeak = from.atTotalPeak;
  }
  into.current = from.current;
  into.totalCurrent = from.totalCurrent;
  into.reserved = std::max(into.reserved, from.reserved);
}

std::string joinDoubles(const std::vector<double>& values) {
  std::string text;
  for (double v : values) {
    text += fmt::format("{:.17g} ", v);
  }
  return text;
}

std::vector<double> splitDoubles(const std::string& text) {
  std::vector<double> values;
  std::istringstream in(text);
  std::string token;
  while (in >> token) {
    values.push_back(std::stod(token));  // "nan" and "inf" parse too
  }
  return values;
}

}  // namespace

// The steps since the last log point, and the outputs of the logged step's micro-batches, kept until the log point
// reads them for the metric.
struct Trainer::LogWindow {
  struct Kept {
    Tensor logits;
    Tensor classes;
    std::int64_t rows = 0;
  };
  std::vector<Kept> kept;
  std::int64_t steps = 0;
};

// One epoch's running state, shared by the parts of trainEpoch.
struct Trainer::EpochPass {
  std::int64_t epoch = 0;
  std::int64_t stepsThisEpoch = 0;
  std::int64_t stepInEpoch = 0;
  std::chrono::steady_clock::time_point start;
  // Note [Shared steps]: claims of the epoch's budget of worker-steps, and how often this rank's shard restarted.
  bool shared = false;
  std::int64_t firstStep = 0;
  std::int64_t budget = 0;
  std::int64_t claimed = 0;
  int reshuffles = 0;
  LogWindow window;
  // The epoch's sums of the logged windows (over the ranks, or this rank's own with shared steps).
  double lossSum = 0;
  std::int64_t lossCount = 0;
  std::vector<double> metricSums;
};

Trainer::Trainer(TrainerParts parts, TrainerOptions options) : parts_(parts), options_(std::move(options)) {
  const int micro = std::max(1, options_.microBatches);
  options_.microBatches = micro;
  stepsPerEpoch_ = parts_.train.batchesPerEpoch() / micro;
  if (stepsPerEpoch_ == 0) {
    fail("{} batches per rank and epoch are fewer than --grad-accum {}", parts_.train.batchesPerEpoch(), micro);
  }
  epochs_ = options_.maxSteps > 0 ? (options_.maxSteps + stepsPerEpoch_ - 1) / stepsPerEpoch_ : options_.epochs;
  totalSteps_ = options_.maxSteps > 0 ? options_.maxSteps : epochs_ * stepsPerEpoch_;
  if (options_.schedule.totalSteps == 0) {
    options_.schedule.totalSteps = totalSteps_;
  }
  if (options_.schedule.stepSize == 0) {
    options_.schedule.stepSize = stepsPerEpoch_ * 30;
  }
  // Every micro-batch's gradients come out scaled by 1/K, so K of them add up to the mean.
  if (micro > 1) {
    parts_.program.setGradientScale(1.0 / micro);
  }
  STRATA_CHECK(options_.saveEverySteps == 0 || !options_.sharedSteps,
               "--save-every: this strategy's workers do not wait for each other (asynchronous), so no step is the "
               "job's to checkpoint inside an epoch; it saves at epoch ends (--save)");
  trainMetric_ = makeMetric(parts_.task, parts_.classes);
  testMetric_ = makeMetric(parts_.task, parts_.classes);
  context_ =
      std::make_unique<TrainerContext>(parts_.program, options_.optimizer, parts_.lossScaler, parts_.group,
                                       parts_.store, parts_.place, options_.strategyOptions, micro, options_.timeout);
  context_->setSubgroupFactory(parts_.subgroups);
  // A constructor that throws runs no destructor: tear the strategy down here (also when its own setup fails half
  // way), or its hooks outlive the plan they were installed on (ASan found that on resuming from a damaged
  // checkpoint).
  try {
    if (parts_.store != nullptr && lead()) {
      // Role processes (parameter servers) apply the workers' update rule: they read it here.
      parts_.store->setString(kRunOptimizerKey, optimizerOptionsToText(options_.optimizer));
    }
    if (options_.rejoin) {
      rejoin();
    } else {
      parts_.strategy.setup(*context_);
    }
    // Note [Accumulation in place]: the plan adds every micro-batch's gradients into the buffers, which each step
    // zeroes first. The mode stays on for the whole run (switching it per micro-batch would discard a recorded step).
    if (options_.accumulation == Accumulation::InPlace && micro > 1) {
      parts_.program.executor().setAccumulateGradients(true);
    }
    if (options_.resume && !options_.rejoin) {
      restoreCheckpoint();
    }
  } catch (...) {
    try {
      parts_.strategy.teardown();
    } catch (const std::exception& e) {
      spdlog::warn("{}", e.what());
    }
    throw;
  }
  setUp_ = true;
}

Trainer::~Trainer() {
  if (setUp_) {
    try {
      parts_.strategy.teardown();
    } catch (const std::exception& e) {  // a destructor must not throw; the strategy's destructor follows
      spdlog::warn("{}", e.what());
    }
  }
  parts_.program.executor().setAccumulateGradients(false);
}

std::vector<double> Trainer::sumOverRanks(const std::string& key, const std::vector<double>& values) {
  if (parts_.store == nullptr || parts_.place.worldSize == 1) {
    return values;
  }
  parts_.store->setString(fmt::format("{}/{}", key, parts_.place.rank), joinDoubles(values));
  if (!lead()) {
    return values;
  }
  std::vector<double> sums(values.size(), 0.0);
  for (int r = 0; r < parts_.place.worldSize; ++r) {
    // Note [Departed ranks]: a worker the strategy could lose adds nothing.
    std::optional<std::string> text;
    try {
      text = getUnlessDeparted(*parts_.store, fmt::format("{}/{}", key, r), r, options_.timeout);
    } catch (const Error&) {
      failWaitingForFigures(key);
    }
    if (!text) {
      continue;
    }
    const std::vector<double> theirs = splitDoubles(*text);
    STRATA_CHECK(theirs.size() == sums.size(), "trainer: rank {} reported {} figures under '{}', expected {}", r,
                 theirs.size(), key, sums.size());
    for (std::size_t i = 0; i < sums.size(); ++i) {
      sums[i] += theirs[i];
    }
  }
  return sums;
}

void Trainer::failWaitingForFigures(const std::string& key) {
  // The first rank that did not write may itself be waiting for a stopped one (in a collective or the store), so
  // every missing rank is named, and the heartbeats say which of them is silent.
  std::vector<int> missing;
  for (int r = 0; r < parts_.place.worldSize; ++r) {
    if (!parts_.store->check({fmt::format("{}/{}", key, r)}) && !parts_.store->check({departedKey(r)})) {
      missing.push_back(r);
    }
  }
  const std::string silent = parts_.describeSilentRanks ? "; " + parts_.describeSilentRanks() : "";
  fail("{} {} of {} did not write '{}/<rank>' within {:g} s (and {} not departed){}",
       missing.size() == 1 ? "rank" : "ranks", fmt::join(missing, ", "), parts_.place.worldSize, key,
       std::chrono::duration<double>(options_.timeout).count(), missing.size() == 1 ? "has" : "have", silent);
}

RunTotals Trainer::run() {
  RunTotals totals;
  totals.epochs = epochs_;
  totals.globalBatchSize = parts_.train.batchSize() * options_.microBatches * parts_.place.worldSize;
  std::int64_t samples = 0;
  const std::int64_t lastEpoch = options_.stopAfterEpoch > 0 ? std::min(epochs_, options_.stopAfterEpoch) : epochs_;
  for (std::int64_t epoch = startEpoch_; epoch < lastEpoch && step_ < totalSteps_; ++epoch) {
    const auto epochStart = std::chrono::steady_clock::now();
    const std::int64_t stepsBefore = step_;
    double lossSum = 0;
    std::int64_t lossCount = 0;
    std::vector<double> metricSums;
    trainEpoch(epoch, lossSum, lossCount, metricSums);
    parts_.strategy.afterEpoch(StepInfo{step_ - 1, options_.microBatches - 1, options_.microBatches});
    const double epochSeconds = seconds(std::chrono::steady_clock::now() - epochStart);
    totals.trainTimeS += epochSeconds;
    samples += (step_ - stepsBefore) * totals.globalBatchSize;
    EpochRecord record;
    record.epoch = epoch;
    record.step = step_;
    record.trainLoss = lossCount > 0 ? lossSum / static_cast<double>(lossCount) : NAN;
    record.trainFigures = metricSums.empty() ? MetricFigures{} : trainMetric_->figures(metricSums);
    record.trainAccuracy = figureOr(record.trainFigures, "accuracy", -1);
    // Evaluation holds the full weights (a sharded strategy gathers them): its peaks are the run's, not training's.
    MemoryStats& memory = allocatorFor(parts_.program.parameters().device()).stats();
    mergePeaks(trainingPeaks_, memory.snapshot());
    record.testFigures = evaluate(epoch);
    record.testAccuracy = figureOr(record.testFigures, "accuracy", -1);
    mergePeaks(runPeaks_, memory.snapshotAndResetPeaks());
    record.epochTimeS = epochSeconds;
    totals.testAccuracy = record.testAccuracy;
    totals.testFigures = record.testFigures;
    if (lead()) {
      parts_.recorder.epoch(record);
    }
    if (options_.saveEachEpoch) {
      // A run that --max-steps ended inside the epoch saves where it is, so a resume continues there.
      saveCheckpoint(epochCutShort_ ? epoch : epoch + 1);
    }
  }
  totals.steps = step_;
  totals.samplesPerS = totals.trainTimeS > 0 ? static_cast<double>(samples) / totals.trainTimeS : 0.0;
  totals.finalTrainLoss = lastLoss_;
  RankFigures mine;
  mine.rank = parts_.place.rank;
  mine.computeS = computeSeconds_;
  mine.strategyFigures = context_->figures();
  // Since the last epoch's evaluation nothing has trained: what is held now (the evaluation plan's reordered weights
  // among it) is the run's, not training's. In later epochs such buffers are held while training, and counted then.
  const MemorySnapshot last = allocatorFor(parts_.program.parameters().device()).stats().snapshot();
  mergePeaks(runPeaks_, last);
  mine.memory = runPeaks_;
  mine.trainingMemory = trainingPeaks_;
  parts_.recorder.finish(totals, mine);
  return totals;
}

void Trainer::trainEpoch(std::int64_t epoch, double& epochLossSum, std::int64_t& epochLossCount,
                         std::vector<double>& epochMetricSums) {
  parts_.train.startEpoch(epoch);
  parts_.recorder.started(epoch);
  EpochPass pass;
  pass.epoch = epoch;
  pass.start = std::chrono::steady_clock::now();
  // Note [Rejoining workers]: a restarted rank starts inside its first epoch, past the batches the job has taken.
  pass.stepInEpoch = std::exchange(rejoinSkip_, 0);
  for (std::int64_t skipped = 0; skipped < pass.stepInEpoch * options_.microBatches; ++skipped) {
    if (!parts_.train.next()) {
      fail("rank {}: the data loader ran out of batches skipping to step {} of epoch {}", parts_.place.rank,
           pass.stepInEpoch, epoch);
    }
  }
  pass.stepsThisEpoch = std::min(stepsPerEpoch_, pass.stepInEpoch + totalSteps_ - step_);
  epochCutShort_ = pass.stepsThisEpoch < stepsPerEpoch_;
  pass.shared = options_.sharedSteps && parts_.store != nullptr && parts_.place.worldSize > 1;
  pass.firstStep = step_;
  pass.budget = pass.stepsThisEpoch * parts_.place.worldSize;
  while (claimStep(pass)) {
    const bool logged = pass.shared
                            ? (pass.stepInEpoch + 1) % options_.logEvery == 0
                            : (step_ + 1) % options_.logEvery == 0 || pass.stepInEpoch + 1 == pass.stepsThisEpoch;
    const double lr = learningRateAt(options_.schedule, step_);
    const double stepSeconds = trainStep(pass, logged, lr);
    ++step_;
    ++pass.stepInEpoch;
    ++pass.window.steps;
    StepRecord record = stepRecord(pass, lr, stepSeconds);
    if (logged) {
      closeLogWindow(pass, record, true);
    }
    parts_.recorder.stepDone(record.step);
    if (lead()) {
      parts_.recorder.progress(record);
    }
    // Note [Checkpoints within an epoch]: the epoch's end saves anyway; here only the steps before it.
    if (options_.saveEverySteps > 0 && step_ % options_.saveEverySteps == 0 && pass.stepInEpoch < pass.stepsThisEpoch) {
      saveCheckpoint(epoch);
    }
  }
  if (pass.shared) {
    // Every rank ends the epoch at the job's step, whichever claims it took last (the time series' last step too).
    step_ = pass.firstStep + pass.stepsThisEpoch;
    parts_.recorder.stepDone(step_);
    if (pass.window.steps > 0) {
      StepRecord record;
      record.epoch = epoch;
      record.step = step_;
      closeLogWindow(pass, record, false);
    }
  }
  epochLossSum = pass.lossSum;
  epochLossCount = pass.lossCount;
  epochMetricSums = std::move(pass.metricSums);
}

// Note [Shared steps]: with a strategy whose workers do not wait for each other (asynchronous parameter servers),
// the epoch's steps are a budget of stepsThisEpoch x W worker-steps that the ranks claim one at a time through the
// store, so a fast rank takes more of them than a slow one instead of idling at the epoch's end. A rank whose shard
// runs out goes over it again (reshuffled). step_ follows the epoch's global position (the claim over W), so the
// learning-rate schedule and the step counts are the job's; logged losses are each rank's own.
bool Trainer::claimStep(EpochPass& pass) {
  if (!pass.shared) {
    return pass.stepInEpoch < pass.stepsThisEpoch;
  }
  pass.claimed = parts_.store->add(fmt::format("trainer/claims/{}", pass.epoch), 1);
  step_ = pass.firstStep + (pass.claimed - 1) / parts_.place.worldSize;
  return pass.claimed <= pass.budget;
}

double Trainer::trainStep(EpochPass& pass, bool logged, double lr) {
  TrainableProgram& program = parts_.program;
  const int micro = options_.microBatches;
  const auto stepStart = std::chrono::steady_clock::now();
  if (parts_.lossScaler != nullptr) {
    program.setLossScale(parts_.lossScaler->scale());  // the scale after the last step's overflow check
  }
  if (options_.accumulation == Accumulation::InPlace && micro > 1) {
    program.parameters().zeroGradients();
  }
  for (int m = 0; m < micro; ++m) {
    std::optional<TrainBatch> batch = parts_.train.next();
    if (!batch && pass.shared) {
      parts_.train.startEpoch(pass.epoch + 100003 * ++pass.reshuffles);  // Note [Shared steps]: this rank's shard again
      batch = parts_.train.next();
    }
    if (!batch) {
      fail("the data loader ran out of batches in epoch {} at step {}", pass.epoch, step_);
    }
    const StepInfo at{step_, m, micro};
    parts_.strategy.beforeForward(at);
    if (parts_.group != nullptr) {
      labelStep(*parts_.group, step_);  // Note [The step in collective errors]
    }
    StepResult result = program.step({batch->input}, batch->targets);
    parts_.strategy.afterBackward(at);
    pendingLosses_.push_back(result.loss);
    if (logged && batch->classes.defined() && !result.outputs.empty()) {
      pass.window.kept.push_back({result.outputs[0], batch->classes, batch->countedRows});
    }
  }
  if (parts_.place.rank == options_.slowRank && options_.slowFactor > 1) {
    std::this_thread::sleep_for((std::chrono::steady_clock::now() - stepStart) * (options_.slowFactor - 1));
  }
  parts_.strategy.step(StepInfo{step_, micro - 1, micro}, lr);
  if (program.parameters().device().type != DeviceType::CPU) {
    program.executor().synchronize();  // the optimizer's kernels belong to this step's time
  }
  const double stepSeconds = seconds(std::chrono::steady_clock::now() - stepStart);
  computeSeconds_ += stepSeconds;
  return stepSeconds;
}

StepRecord Trainer::stepRecord(const EpochPass& pass, double lr, double stepSeconds) const {
  const std::int64_t rowsPerStep = parts_.train.batchSize() * options_.microBatches * parts_.place.worldSize;
  const double elapsed = seconds(std::chrono::steady_clock::now() - pass.start);
  StepRecord record;
  record.epoch = pass.epoch;
  record.step = step_;
  record.stepsInEpoch = pass.stepsThisEpoch;
  record.stepInEpoch =
      pass.shared ? std::min(pass.claimed / parts_.place.worldSize, pass.stepsThisEpoch) : pass.stepInEpoch;
  record.lr = lr;
  record.samplesPerS = static_cast<double>(record.stepInEpoch * rowsPerStep) / std::max(elapsed, 1e-9);
  record.stepTimeMs = 1000.0 * stepSeconds;
  record.etaS = static_cast<double>((pass.stepsThisEpoch - record.stepInEpoch) * rowsPerStep) /
                std::max(record.samplesPerS, 1e-9);
  record.loss = lastLoss_;
  return record;
}

void Trainer::closeLogWindow(EpochPass& pass, StepRecord& record, bool recordIt) {
  const int micro = options_.microBatches;
  // Note [Reading the loss]: one read of the window's losses, then the ranks' sums through the store.
  double lossSum = 0;
  for (std::size_t i = 0; i < pendingLosses_.size(); ++i) {
    const double loss = hostScalar(pendingLosses_[i]);
    if (!std::isfinite(loss)) {
      const std::int64_t badStep = step_ - pass.window.steps + static_cast<std::int64_t>(i) / micro;
      fail("rank {}: the loss became {} at epoch {} step {} (learning rate {}); lower --lr or clip gradients",
           parts_.place.rank, loss, pass.epoch, badStep, learningRateAt(options_.schedule, badStep));
    }
    lossSum += loss / micro;  // a step's loss is the mean of its micro-batches'
  }
  trainMetric_->reset();
  for (const LogWindow::Kept& kept : pass.window.kept) {
    trainMetric_->add(kept.logits, kept.classes, kept.rows);
  }
  std::vector<double> mine{lossSum, static_cast<double>(pass.window.steps)};
  const std::vector<double> metricSums = trainMetric_->sums();
  mine.insert(mine.end(), metricSums.begin(), metricSums.end());
  // Note [Shared steps]: ranks that do not wait for each other do not meet at log points either.
  const std::vector<double> sums = pass.shared ? mine : sumOverRanks(fmt::format("trainer/log/{}", step_), mine);
  const double steps = std::max(sums[1], 1.0);
  lastLoss_ = sums[0] / steps;
  pass.lossSum += sums[0];
  pass.lossCount += static_cast<std::int64_t>(sums[1]);
  const std::vector<double> windowSums(sums.begin() + 2, sums.end());
  pass.metricSums.resize(windowSums.size(), 0.0);
  for (std::size_t i = 0; i < windowSums.size(); ++i) {
    pass.metricSums[i] += windowSums[i];
  }
  record.loss = lastLoss_;
  record.figures = trainMetric_->figures(windowSums);
  const std::map<std::string, double> strategyFigures = context_->figures();
  if (const auto sent = strategyFigures.find("gradient_bytes_sent"); sent != strategyFigures.end()) {
    if (step_ > stepAtLastLog_) {
      record.gradientBytesPerStep = (sent->second - bytesAtLastLog_) / static_cast<double>(step_ - stepAtLastLog_);
    }
    bytesAtLastLog_ = sent->second;
    stepAtLastLog_ = step_;
  }
  record.accuracy = figureOr(record.figures, "accuracy", -1);
  pendingLosses_.clear();
  pass.window.kept.clear();
  pass.window.steps = 0;
  if (lead() && recordIt && (pass.shared || step_ % options_.logEvery == 0)) {
    parts_.recorder.step(record);
  }
}

MetricFigures Trainer::evaluate(std::int64_t epoch) {
  if (parts_.test == nullptr) {
    return {};
  }
  parts_.strategy.beforeEvaluate();
  testMetric_->reset();
  parts_.test->startEpoch(0);
  while (std::optional<TrainBatch> batch = parts_.test->next()) {
    const Tensor scores = parts_.program.evaluate({batch->input})[0];
    testMetric_->add(scores, batch->classes, batch->countedRows);
  }
  parts_.strategy.afterEvaluate();
  const std::vector<double> sums = sumOverRanks(fmt::format("trainer/eval/{}", epoch), testMetric_->sums());
  return testMetric_->figures(sums);
}

void Trainer::withFullWeights(const std::function<void()>& fn) {
  parts_.strategy.beforeEvaluate();
  fn();
  parts_.strategy.afterEvaluate();
}

// Note [Checkpoint commit]: every rank writes its entries (the lead also the trainer's own state), then reports to
// the store; the lead waits for all of them before it publishes the checkpoint, so a checkpoint is either whole or
// not there.
void Trainer::saveCheckpoint(std::int64_t epochsDone) {
  STRATA_CHECK(parts_.checkpoints != nullptr, "trainer: checkpoints requested but no checkpoint store was given");
  {
    std::unique_ptr<StateWriter> writer = parts_.checkpoints->beginWrite();
    if (lead()) {
      nlohmann::json trainer = {{"epochs_done", epochsDone},
                                {"steps", step_},
                                {"executor_runs", parts_.program.executor().runCount()},
                                {"world_size", parts_.place.worldSize},
                                {"channels_last_parameters", parts_.program.channelsLastParameters()}};
      if (parts_.lossScaler != nullptr) {
        const LossScalerState scaling = parts_.lossScaler->state();
        trainer["loss_scale"] = {
            {"scale", scaling.scale}, {"good_steps", scaling.goodSteps}, {"skipped", scaling.skipped}};
      }
      writer->putText("trainer", trainer.dump());
      for (const auto& [name, tensor] : parts_.program.buffers()) {
        writer->putTensor("buffer/" + name, tensor);
      }
    }
    parts_.strategy.saveState(*context_, *writer);
  }
  if (parts_.store != nullptr && parts_.place.worldSize > 1) {
    // One key per rank, not a counter: a rank that writes twice (restarted, Note [Rejoining workers]) counts once.
    // The step tells checkpoints of one epoch apart (Note [Checkpoints within an epoch]).
    const std::string key = fmt::format("trainer/checkpoint/{}/{}", epochsDone, step_);
    parts_.store->setString(fmt::format("{}/{}", key, parts_.place.rank), "1");
    if (lead()) {
      std::vector<std::string> keys;
      for (int r = 0; r < parts_.place.worldSize; ++r) {
        keys.push_back(fmt::format("{}/{}", key, r));
      }
      const std::vector<std::string> missing = parts_.store->tryWait(keys, options_.timeout);
      if (!missing.empty()) {
        fail("checkpoint at step {} (epoch {}): only {} of {} ranks finished writing within the timeout", step_,
             epochsDone, parts_.place.worldSize - static_cast<int>(missing.size()), parts_.place.worldSize);
      }
    }
  }
  if (lead()) {
    parts_.checkpoints->commit();
  }
}

// Note [Rejoining workers]: a rank restarted by the launcher (--max-restarts) joins a job that is training. The
// strategy brings its state to the job's and says which step to compute; the rank then runs from there: the batches
// of that step within its epoch (the loader's order depends on the seed and the epoch only, so skipping them gives
// the batches the dead process would have had), the executor's run count (per-run randomness) and the schedule's
// step as an uninterrupted rank would have them. What differs is the log window the dead process left unfinished:
// its losses are lost, so the next log point and the epoch's mean loss count the steps since the rejoin only.
void Trainer::rejoin() {
  if (options_.sharedSteps) {
    fail("trainer: a restarted rank cannot rejoin a job whose ranks claim shared steps (asynchronous strategies)");
  }
  const std::int64_t step = parts_.strategy.rejoin(*context_);
  if (step < 0 || step > totalSteps_) {
    fail("trainer: the strategy wants the restarted rank {} to rejoin at step {}, but the run has steps 0 to {}",
         parts_.place.rank, step, totalSteps_);
  }
  step_ = step;
  startEpoch_ = step / stepsPerEpoch_;
  rejoinSkip_ = step % stepsPerEpoch_;
  parts_.program.executor().setRunCount(static_cast<std::uint64_t>(step * options_.microBatches));
  spdlog::info("rank {}: restarted, rejoining the job at step {} (epoch {}, step {} of it)", parts_.place.rank, step,
               startEpoch_, rejoinSkip_);
}

// Note [Channels-last weights]: checkpoints hold parameters and optimizer state as the plan stores them, so a
// checkpoint is read only by a plan that stores the same parameters channels-last (absent: none, as before).
void Trainer::checkParameterLayouts(const std::vector<std::string>& saved) const {
  const std::vector<std::string> current = parts_.program.channelsLastParameters();
  if (saved == current)
    return;
  const auto describe = [](const std::vector<std::string>& names) {
    return names.empty() ? std::string("every weight channels-first")
                         : fmt::format("{} convolution weight(s) channels-last ('{}' first)", names.size(), names[0]);
  };
  fail(
      "{}: the checkpoint stores {}, but this run's plan stores {}: resume with the layout of the run that wrote "
      "it (strata train's --channels-last)",
      parts_.checkpoints->describe(), describe(saved), describe(current));
}

void Trainer::restoreCheckpoint() {
  STRATA_CHECK(parts_.checkpoints != nullptr, "trainer: resume requested but no checkpoint store was given");
  std::unique_ptr<StateReader> reader = parts_.checkpoints->open();
  nlohmann::json trainer;
  try {
    trainer = nlohmann::json::parse(reader->getText("trainer"));
    startEpoch_ = trainer.at("epochs_done").get<std::int64_t>();
    step_ = trainer.at("steps").get<std::int64_t>();
    // Note [Checkpoints within an epoch]: a checkpoint taken inside epoch E says E is not done and how many steps
    // the job took; the resumed run skips the batches of those steps in E (the loader's order depends on the seed
    // and the epoch only, so the same windows or images follow), as a rejoining rank does.
    rejoinSkip_ = std::max<std::int64_t>(0, step_ - startEpoch_ * stepsPerEpoch_);
    const int savedWorld = trainer.value("world_size", parts_.place.worldSize);
    STRATA_CHECK(rejoinSkip_ == 0 || savedWorld == parts_.place.worldSize,
                 "{}: the checkpoint was taken {} steps into epoch {} by {} ranks; inside an epoch a run resumes on "
                 "the same number of ranks (their shards of the epoch differ otherwise): resume on {} ranks, or from "
                 "a checkpoint at an epoch's end",
                 parts_.checkpoints->describe(), rejoinSkip_, startEpoch_, savedWorld, savedWorld);
    STRATA_CHECK(rejoinSkip_ < stepsPerEpoch_ || stepsPerEpoch_ == 0,
                 "{}: the checkpoint is {} steps into epoch {}, which has {} steps in this run (another batch size, "
                 "world size or data set?)",
                 parts_.checkpoints->describe(), rejoinSkip_, startEpoch_, stepsPerEpoch_);
    parts_.program.executor().setRunCount(trainer.at("executor_runs").get<std::uint64_t>());
    checkParameterLayouts(trainer.value("channels_last_parameters", std::vector<std::string>{}));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: corrupt trainer state: {}", parts_.checkpoints->describe(), e.what());
  }
  for (const auto& [name, tensor] : parts_.program.buffers()) {
    reader->getTensor("buffer/" + name, tensor);
  }
  parts_.strategy.loadState(*context_, *reader);
  // fp16 resumes with the scale it had; a checkpoint of another precision leaves the scaler at its start.
  if (parts_.lossScaler != nullptr && trainer.contains("loss_scale")) {
    try {
      const nlohmann::json& scaling = trainer.at("loss_scale");
      parts_.lossScaler->restore(LossScalerState{scaling.at("scale").get<double>(),
                                                 scaling.at("good_steps").get<std::int64_t>(),
                                                 scaling.at("skipped").get<std::int64_t>()});
    } catch (const nlohmann::json::exception& e) {
      fail("{}: corrupt loss_scale entry: {}", parts_.checkpoints->describe(), e.what());
    } catch (const Error& e) {
      fail("{}: {}", parts_.checkpoints->describe(), e.what());
    }
  }
}

}  // namespace strata
