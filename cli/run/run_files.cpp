#include "run/run_files.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "strata/comm/departures.h"
#include "strata/error.h"
#include "strata/memory_category.h"
#include "strata/thread_names.h"
#ifdef STRATA_HAS_CUDA
#include "strata/cuda/gpu_monitor.h"
#endif

namespace strata::cli {
namespace {

nlohmann::json categoriesJson(const std::array<std::int64_t, kMemoryCategoryCount>& bytes) {
  nlohmann::json breakdown;
  for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
    breakdown[std::string(memoryCategoryName(static_cast<MemoryCategory>(c)))] = bytes[c];
  }
  return breakdown;
}

// A figure that is not measured (no classes to score) is null in the outputs, not a made-up number.
nlohmann::json orNull(double value) {
  return value >= 0 && std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

// Each of the task's figures (Note [Metrics]) as PREFIX + name, but those in `skip`.
void addFigures(nlohmann::json& into, const std::string& prefix, const MetricFigures& figures,
                std::initializer_list<std::string_view> skip) {
  for (const MetricFigure& f : figures) {
    if (std::find(skip.begin(), skip.end(), f.name) == skip.end()) {
      into[prefix + f.name] = orNull(f.value);
    }
  }
}

// "test accuracy 91.20%" or "test perplexity 5.213": the headline figure of a test split, for the console.
std::string describeHeadline(const MetricFigures& figures) {
  if (figures.empty()) {
    return "no test split";
  }
  const MetricFigure& headline = figures.front();
  if (headline.value < 0) {
    return fmt::format("test {} -", headline.name);
  }
  const bool share = headline.name.find("accuracy") != std::string::npos || headline.name == "mean_iou";
  return share ? fmt::format("test {} {:.2f}%", headline.name, 100.0 * headline.value)
               : fmt::format("test {} {:.4g}", headline.name, headline.value);
}

}  // namespace

// GPU utilisation and memory from NVML, sampled while training (CUDA builds on a GPU only).
struct RunFiles::GpuSampling {
#ifdef STRATA_HAS_CUDA
  std::optional<cuda::GpuMonitor> monitor;
#endif
  nlohmann::json stop() {
    nlohmann::json figures = {{"gpu_utilization_mean", nullptr}};
#ifdef STRATA_HAS_CUDA
    if (monitor) {
      const cuda::GpuUsageSummary usage = monitor->stop();
      if (usage.available) {
        figures = {{"gpu_utilization_mean", usage.utilizationMean},
                   {"gpu_utilization_max", usage.utilizationMax},
                   // NVML's figure is the whole device's (every process on it, ranks sharing it included).
                   {"gpu_device_memory_used_max_bytes", usage.memoryUsedMaxBytes},
                   {"gpu_memory_total_bytes", usage.memoryTotalBytes},
                   {"gpu_samples", usage.samples}};
      } else {
        figures["gpu_monitor_unavailable"] = usage.unavailableReason;
      }
    }
#endif
    return figures;
  }
};

RunFiles::RunFiles(Setup setup)
    : setup_(std::move(setup)), tty_(isatty(STDOUT_FILENO) != 0), gpu_(std::make_unique<GpuSampling>()) {
  if (lead()) {
    metrics_.emplace(setup_.runDir);
  }
#ifdef STRATA_HAS_CUDA
  if (setup_.device.type == DeviceType::CUDA) {
    gpu_->monitor.emplace(setup_.device.index, std::chrono::milliseconds(100));
  }
#endif
  if (setup_.samplePeriod.count() > 0 && !setup_.runDir.empty()) {
    ResourceSampler::Options sampling{.file = setup_.runDir / "timeseries" / fmt::format("rank-{}.jsonl", setup_.rank),
                                      .rank = setup_.rank,
                                      .device = setup_.device,
                                      .period = setup_.samplePeriod,
                                      .gpu = nullptr};
#ifdef STRATA_HAS_CUDA
    if (gpu_->monitor) {
      sampling.gpu = [this]() -> std::optional<GpuReading> {
        const std::optional<cuda::GpuSample> sample = gpu_->monitor->latest();
        return sample ? std::optional(GpuReading{sample->utilization, sample->memoryUsedBytes}) : std::nullopt;
      };
    }
#endif
    sampler_ = std::make_unique<ResourceSampler>(std::move(sampling));
  }
}

RunFiles::~RunFiles() = default;

// One line redrawn in place on a terminal; plain lines (every logEvery steps) otherwise.
void RunFiles::stepDone(std::int64_t step) {
  if (sampler_) {
    sampler_->setStep(step);
  }
}

void RunFiles::progress(const StepRecord& r) {
  // The loss is read at log points only (Note [Reading the loss]): "-" until the first.
  const std::string loss = std::isnan(r.loss) ? std::string("-") : fmt::format("{:.4f}", r.loss);
  const std::string line = fmt::format("epoch {} step {}/{}  loss {}  {:.0f} samples/s  ETA {:.0f}s", r.epoch,
                                       r.stepInEpoch, r.stepsInEpoch, loss, r.samplesPerS, r.etaS);
  if (tty_) {
    const int width = 30;
    const int filled = r.stepsInEpoch > 0 ? static_cast<int>(width * r.stepInEpoch / r.stepsInEpoch) : 0;
    fmt::print("\r[{}{}] {}\x1b[K", std::string(static_cast<std::size_t>(filled), '#'),
               std::string(static_cast<std::size_t>(width - filled), '.'), line);
    std::fflush(stdout);
    if (r.stepInEpoch == r.stepsInEpoch) {
      fmt::print("\n");
    }
  } else if (r.stepInEpoch % setup_.logEvery == 0 || r.stepInEpoch == r.stepsInEpoch) {
    fmt::print("{}\n", line);
  }
}

void RunFiles::step(const StepRecord& r) {
  nlohmann::json line = {{"type", "step"},
                         {"epoch", r.epoch},
                         {"step", r.step},
                         {"loss", r.loss},
                         {"train_accuracy", orNull(r.accuracy)},
                         {"lr", r.lr},
                         {"samples_per_s", r.samplesPerS},
                         {"step_time_ms", r.stepTimeMs}};
  // The task's figures of the logged batches (Note [Metrics]); "loss" is the window's, already there.
  addFigures(line, "train_", r.figures, {"loss"});
  if (r.gradientBytesPerStep >= 0) {
    line["gradient_bytes_per_step"] = r.gradientBytesPerStep;  // since the last log point (docs/compression.md)
  }
  metrics_->write(line);
}

void RunFiles::epoch(const EpochRecord& r) {
  fmt::print("epoch {}: train loss {:.4f}, {}, {:.1f}s\n", r.epoch, r.trainLoss, describeHeadline(r.testFigures),
             r.epochTimeS);
  nlohmann::json line = {{"type", "epoch"},
                         {"epoch", r.epoch},
                         {"step", r.step},
                         {"train_loss", r.trainLoss},
                         {"train_accuracy", orNull(r.trainAccuracy)},
                         {"test_accuracy", orNull(r.testAccuracy)},
                         {"epoch_time_s", r.epochTimeS}};
  addFigures(line, "train_", r.trainFigures, {"loss"});
  addFigures(line, "test_", r.testFigures, {});
  metrics_->write(line);
}

void RunFiles::finish(const RunTotals& totals, const RankFigures& mine) {
  const auto figure = [&](const char* key) {
    const auto it = mine.strategyFigures.find(key);
    return it == mine.strategyFigures.end() ? 0.0 : it->second;
  };
  nlohmann::json rankFigures = {
      {"rank", mine.rank},
      {"peak_memory_bytes", mine.memory.totalPeak},
      {"memory_breakdown", categoriesJson(mine.memory.peak)},
      // Without evaluation, which holds the full weights even under a sharded strategy.
      {"training_peak_memory_bytes", mine.trainingMemory.totalPeak},
      {"training_memory_breakdown", categoriesJson(mine.trainingMemory.peak)},
      // What the training peak was made of (each category's own peak may come elsewhere).
      {"training_memory_at_peak", categoriesJson(mine.trainingMemory.atTotalPeak)},
      {"compute_s", mine.computeS},
      {"communication_s", figure("communication_s")},
      {"collective_s", figure("collective_s")},
      // CPU seconds of the process's communication threads since it started (Note [Thread names]).
      {"communication_cpu_s", cpuSecondsOfThreadsNamed(kCommunicationThread)},
      {"reserved_memory_bytes", mine.memory.reserved}};
  if (setup_.restarts > 0) {
    rankFigures["restarts"] = setup_.restarts;  // compute_s and the peaks are the last process's
  }
  for (const auto& [key, value] : mine.strategyFigures) {
    rankFigures.emplace(key, value);  // the strategy's own figures, beside the standard ones
  }
  rankFigures.update(gpu_->stop());
  if (setup_.store != nullptr && setup_.worldSize > 1) {
    setup_.store->setString(fmt::format("summary/rank/{}", setup_.rank), rankFigures.dump());
  }
  if (!lead()) {
    return;
  }
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < setup_.worldSize; ++r) {
    if (r == 0 || setup_.store == nullptr) {
      ranks.push_back(rankFigures);
      continue;
    }
    const std::optional<std::string> theirs =
        getUnlessDeparted(*setup_.store, fmt::format("summary/rank/{}", r), r, setup_.timeout);
    ranks.push_back(
        theirs ? nlohmann::json::parse(*theirs)
               : nlohmann::json{{"rank", r}, {"departed", setup_.store->getString(departedKey(r), setup_.timeout)}});
  }
  nlohmann::json summary = setup_.runFields;
  summary.update({{"world_size", setup_.worldSize},
                  {"epochs", totals.epochs},
                  {"steps", totals.steps},
                  {"global_batch_size", totals.globalBatchSize},
                  {"train_time_s", totals.trainTimeS},
                  {"samples_per_s", totals.samplesPerS},
                  {"final_train_loss", totals.finalTrainLoss},
                  {"test_accuracy", orNull(totals.testAccuracy)},
                  {"ranks", ranks}});
  addFigures(summary, "test_", totals.testFigures, {});
  summary["test_metric"] = totals.testFigures.empty() ? nlohmann::json() : nlohmann::json(totals.testFigures[0].name);
  if (std::any_of(setup_.roles.begin(), setup_.roles.end(), [](const RoleRequest& r) { return r.count > 0; })) {
    summary["servers"] = roleFigures();
  }
  if (setup_.finalFields) {
    setup_.finalFields(summary);
  }
  writeJsonAtomically(setup_.runDir / "summary.json", summary);
  fmt::print("summary: {}\n", (setup_.runDir / "summary.json").string());
}

// Note [Role figures]: each role process publishes its own figures in the store before the answers that changed
// them, and every rank has had its last answer by now, so what is there is final. A role that publishes nothing (a
// strategy's helper that measures nothing) is listed as not reported.
nlohmann::json RunFiles::roleFigures() const {
  nlohmann::json servers = nlohmann::json::array();
  for (const RoleRequest& role : setup_.roles) {
    for (int index = 0; index < role.count; ++index) {
      const std::string key = roleFiguresKey(role.name, index);
      nlohmann::json entry = {{"role", role.name}, {"index", index}};
      try {
        if (setup_.store == nullptr || !setup_.store->check({key})) {
          entry["reported"] = false;
        } else {
          entry.update(nlohmann::json::parse(setup_.store->getString(key, setup_.timeout)));
          entry["role"] = role.name;
          entry["index"] = index;
        }
      } catch (const std::exception& e) {  // the run's figures are written whatever one role published
        entry["reported"] = false;
        entry["error"] = fmt::format("cannot read {} from the store: {}", key, e.what());
        spdlog::warn("summary.json: role {} {}: {}", role.name, index, entry["error"].get<std::string>());
      }
      servers.push_back(std::move(entry));
    }
  }
  return servers;
}

void RunFiles::release() {
  if (setup_.store == nullptr) {
    return;
  }
  if (setup_.worldSize == 1) {
    if (lead()) {
      setup_.store->setString(kJobDoneKey, "1");  // Note [Role stop]: a one-worker job's roles
    }
    return;
  }
  // Note [Leaving the store]: rank 0 serves the store, so it leaves last. It says it is done, then waits until every
  // other rank has said it read that: a rank still waiting when rank 0's process ends would lose its answer (on a
  // lossy link the answer may still be in flight, and the rank's heartbeat meets a closed socket first). Roles stop
  // on the same key (Note [Role stop]).
  if (lead()) {
    setup_.store->setString(kJobDoneKey, "1");
    for (int r = 1; r < setup_.worldSize; ++r) {
      try {
        getUnlessDeparted(*setup_.store, fmt::format("summary/left/{}", r), r, setup_.timeout);
      } catch (const Error& e) {  // the run is over and its files are written: say so, do not fail it
        spdlog::warn("rank 0 leaves the store before rank {} said it was done: {}", r, e.what());
      }
    }
  } else {
    setup_.store->getString(kJobDoneKey, setup_.timeout);
    try {
      setup_.store->setString(fmt::format("summary/left/{}", setup_.rank), "1");
    } catch (const std::exception&) {
      // Rank 0 saw the key and left before its answer came back (a closed socket drops what it had unsent): fine.
    }
  }
}

}  // namespace strata::cli
