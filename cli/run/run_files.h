#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "run/resource_sampler.h"
#include "run/run_outputs.h"
#include "strata/comm/store.h"
#include "strata/device.h"
#include "strata/sdk/roles.h"
#include "strata/train/run_recorder.h"

namespace strata::cli {

// `strata train`'s RunRecorder: a progress line on the terminal, RUN_DIR/metrics.jsonl, the epoch lines, and
// RUN_DIR/summary.json with every rank's figures (collected on the lead rank through the store).
class RunFiles final : public RunRecorder {
 public:
  struct Setup {
    std::filesystem::path runDir;
    int rank = 0;
    int worldSize = 1;
    Store* store = nullptr;
    std::chrono::milliseconds timeout{std::chrono::minutes(5)};
    std::int64_t logEvery = 20;
    Device device = Device::cpu();
    // The summary's fields that describe the run (model, strategy, device, precision, ...), set by the command.
    nlohmann::json runFields = nlohmann::json::object();
    // Fields added to summary.json after training (the plan's layout and CUDA graph reports, the loss scaler).
    std::function<void(nlohmann::json&)> finalFields;
    // Note [Resource sampling]: RUN_DIR/timeseries/rank-<r>.jsonl every period; 0 turns it off.
    std::chrono::milliseconds samplePeriod{500};
    // The strategy's role processes (parameter servers): summary.json lists what each published of itself under
    // "servers" (Note [Role figures] in strata/sdk/roles.h).
    std::vector<RoleRequest> roles;
    // How often the launcher restarted this rank (Note [Rejoining workers]): its figures are its last process's.
    int restarts = 0;
  };

  explicit RunFiles(Setup setup);
  ~RunFiles() override;

  void stepDone(std::int64_t step) override;
  void progress(const StepRecord& record) override;
  void step(const StepRecord& record) override;
  void epoch(const EpochRecord& record) override;
  void finish(const RunTotals& totals, const RankFigures& mine) override;

  // After the last collective of the run: the lead tells the other ranks that it no longer needs the store it
  // serves, they wait for that and say they have seen it, and the lead waits for them (Note [Leaving the store]).
  void release();

 private:
  bool lead() const { return setup_.rank == 0; }
  nlohmann::json roleFigures() const;

  Setup setup_;
  bool tty_;
  std::optional<MetricsLog> metrics_;
  struct GpuSampling;
  std::unique_ptr<GpuSampling> gpu_;
  std::unique_ptr<ResourceSampler> sampler_;  // after gpu_: it reads the GPU monitor until it stops
};

}  // namespace strata::cli
