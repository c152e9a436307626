#include "ps_recovery.h"

#include <filesystem>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "strata/error.h"

namespace strata::ps {

ServerRecovery::ServerRecovery(const PsOptions& options, int serverIndex, int workers, std::string jobId,
                               std::int64_t restarts, const std::string& secretFile)
    : options_(options),
      serverIndex_(serverIndex),
      jobId_(std::move(jobId)),
      restarts_(restarts),
      durable_(static_cast<std::size_t>(workers), 0) {
  if (options_.checkpointEvery <= 0) {
    return;
  }
  std::filesystem::path dir = options_.checkpointDir;
  if (dir.empty()) {
    if (secretFile.empty()) {
      fail(
          "ps-server {}: checkpoint_every needs a directory: give --strategy-opt checkpoint_dir=DIR (the "
          "launcher's per-job directory is not known here)",
          serverIndex_);
    }
    dir = std::filesystem::path(secretFile).parent_path() / "ps-checkpoints";
  }
  std::filesystem::create_directories(dir);
  path_ = (dir / fmt::format("server-{}.ckpt", serverIndex_)).string();
}

std::optional<ServerCheckpoint> ServerRecovery::latest() const {
  if (!enabled()) {
    return std::nullopt;
  }
  std::optional<ServerCheckpoint> checkpoint = readServerCheckpointHeader(path_);
  if (checkpoint && (checkpoint->jobId != jobId_ || checkpoint->lastSequence.size() != durable_.size())) {
    fmt::print("ps-server {}: ignoring {}: it belongs to another job\n", serverIndex_, path_);
    return std::nullopt;
  }
  return checkpoint;
}

std::vector<std::uint64_t> ServerRecovery::restore(ServerCheckpoint& checkpoint, UpdateRule& rule) {
  checkpoint.values = rule.values();
  checkpoint.buffers = rule.buffers();
  checkpoint.optimizerState = rule.optimizer().state();
  readServerCheckpointTensors(path_, checkpoint);
  rule.optimizer().setSteps(checkpoint.optimizerSteps);
  rule.restore(checkpoint.version, checkpoint.clock);
  durable_ = checkpoint.lastSequence;
  fmt::print("ps-server {}: restart {}: reloaded {} at version {}; the workers resend what came after it\n",
             serverIndex_, restarts_, path_, checkpoint.version);
  return checkpoint.lastSequence;
}

void ServerRecovery::afterUpdate(const FlatLayout& layout, UpdateRule& rule,
                                 const std::vector<std::uint64_t>& lastSequence) {
  if (!enabled() || rule.version() % options_.checkpointEvery != 0) {
    return;
  }
  ServerCheckpoint checkpoint;
  checkpoint.jobId = jobId_;
  checkpoint.layout = layout;
  checkpoint.version = rule.version();
  checkpoint.restarts = restarts_;
  checkpoint.optimizerSteps = rule.optimizer().steps();
  checkpoint.lastSequence = lastSequence;
  for (int w = 0; w < rule.workers(); ++w) {
    checkpoint.clock.push_back(rule.worker(w).clock);
  }
  checkpoint.values = rule.values();
  checkpoint.buffers = rule.buffers();
  checkpoint.optimizerState = rule.optimizer().state();
  writeServerCheckpoint(path_, checkpoint);
  durable_ = lastSequence;
}

std::uint64_t ServerRecovery::durable(int worker) const {
  if (!enabled()) {
    return std::numeric_limits<std::uint64_t>::max();
  }
  return durable_.at(static_cast<std::size_t>(worker));
}

}  // namespace strata::ps
