#pragma once

// The update rule of one parameter server, free of ZeroMQ: the values, gradients, buffers and optimizer of the
// server's key ranges, each worker's clock, and the decision which pushes are answered when. The server
// (ps_server.h) moves the bytes; this class says what they do, so the consistency models are tested without sockets
// (tests/plugins/ps/ps_update_rule_test.cpp).
//
// Note [PS modes]: sync gathers one push from every worker, averages, applies one update and then answers all of
// them (DDP's result, one update per step). async applies every push at once and answers with the newest values;
// the staleness of a push (this server's version minus the version its gradients were computed on) is measured
// and, with lr_staleness, divides its learning rate. ssp is async, but the answer to a worker more than K pushes
// ahead of the slowest live worker is held until the slowest catches up (Petuum Bosen's bounded staleness).

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ps_keys.h"
#include "ps_options.h"
#include "ps_protocol.h"
#include "strata/sdk/optimizer.h"

namespace strata::ps {

// A push whose answer is due now: the values go to `worker`, reporting `staleness`.
struct Release {
  int worker = 0;
  int staleness = 0;
};

// What the rule knows of one worker.
struct WorkerClock {
  std::int64_t clock = 0;  // pushes applied (sync: pushes gathered)
  bool waiting = false;    // its answer is held (sync round or ssp bound)
  bool departed = false;   // died; the job goes on without it (Note [Departed ranks])
  bool idle = false;       // done with its epoch's steps (Kind::Idle) until its next push
  double stalenessSum = 0;
  std::int64_t stalenessMax = 0;
  std::int64_t pushes = 0;
};

class UpdateRule {
 public:
  using OptimizerMaker = std::function<std::unique_ptr<SliceOptimizer>(std::vector<ParameterSlice>)>;
  using Trace = std::function<void(const std::string& json)>;

  // `keepPrevious`: sync mode keeps the values before the last update (Note [Rejoining workers]).
  UpdateRule(const PsOptions& options, int serverIndex, int workers, bool holdsBuffers, bool keepPrevious,
             Trace trace = {});
  ~UpdateRule();

  // Allocates values, gradients and buffers for `segments` of `layout` and the optimizer over them.
  void allocate(const FlatLayout& layout, const std::vector<Segment>& segments, const OptimizerMaker& makeOptimizer);
  bool allocated() const { return optimizer_ != nullptr; }
  // Sets the values, then (server 0) the buffers, from `data`, one frame each (an Init, or a resumed run's values).
  void assign(std::span<const Frame> data);

  // Applies a validated, new push of `worker`: `data` holds the gradients of the segments, then the buffers.
  // Returns the answers due now (sync: every worker's once the round is full; async: this one; ssp: whoever is
  // within the bound).
  std::vector<Release> push(int worker, const Header& request, std::span<const Frame> data);
  // A worker done with its epoch's steps, or gone for good, no longer holds the others back: the answers due now.
  std::vector<Release> markIdle(int worker);
  std::vector<Release> markDeparted(int worker);
  // DC-ASGD: the values now sent to `worker` are those its next gradient is computed on.
  void recordSent(int worker);

  const WorkerClock& worker(int w) const { return workers_.at(static_cast<std::size_t>(w)); }
  int workers() const { return static_cast<int>(workers_.size()); }
  // Restoring a checkpoint: the version and each worker's clock.
  void restore(std::int64_t version, const std::vector<std::int64_t>& clocks);

  std::int64_t version() const { return version_; }
  const std::vector<Tensor>& values() const { return values_; }
  const std::vector<Tensor>& buffers() const { return buffers_; }
  // The values and buffers before the last sync update, once one happened with keepPrevious.
  bool hasPrevious() const { return hasPrevious_; }
  const std::vector<Tensor>& previousValues() const { return previous_; }
  const std::vector<Tensor>& previousBuffers() const { return previousBuffers_; }
  SliceOptimizer& optimizer() { return *optimizer_; }
  const SliceOptimizer& optimizer() const { return *optimizer_; }

 private:
  struct PerWorker {
    Tensor pulledValues;                // DC-ASGD: the values this worker computed its next gradient on (bytes)
    std::vector<Tensor> latestBuffers;  // async/ssp, server 0: this worker's last pushed buffers
  };

  std::vector<Release> pushSync(int worker, const Header& request, std::span<const Frame> data);
  int pushAsync(int worker, const Header& request, std::span<const Frame> data);
  std::vector<Release> releaseHeld();
  void averageLatestBuffers();
  std::int64_t slowestClock() const;

  PsOptions options_;
  int serverIndex_;
  bool holdsBuffers_;
  bool keepPrevious_;
  Trace trace_;  // empty unless the server writes a trace: nothing is formatted then
  std::vector<WorkerClock> workers_;
  std::vector<PerWorker> perWorker_;
  std::vector<int> heldStaleness_;  // per worker: the staleness its held answer reports
  std::vector<Tensor> values_;      // per segment, category Parameters
  std::vector<Tensor> gradients_;   // per segment, category Gradients (the round's sum in sync)
  std::vector<Tensor> buffers_;     // server 0: the buffers' values
  std::vector<Tensor> bufferSums_;
  std::unique_ptr<SliceOptimizer> optimizer_;
  std::int64_t version_ = 0;
  int arrived_ = 0;  // sync: pushes in the current round
  double roundLr_ = 0;
  bool hasPrevious_ = false;
  std::vector<Tensor> previous_;
  std::vector<Tensor> previousBuffers_;
};

}  // namespace strata::ps
