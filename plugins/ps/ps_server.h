#pragma once

// One parameter server (`strata ps-server`, the `ps` strategy's role): it holds the parameters of its key ranges
// (Note [PS keys]) and the optimizer state for them, and applies the workers' gradients in the mode the job runs.
//
// Note [PS modes]: sync gathers one push from every worker, averages, applies one update and then answers all of
// them (DDP's result, one update per step). async applies every push at once and answers with the newest values;
// the staleness of a push (this server's version minus the version its gradients were computed on) is measured
// and, with lr_staleness, divides its learning rate. ssp is async, but the answer to a worker more than K pushes
// ahead of the slowest live worker is held until the slowest catches up (Petuum Bosen's bounded staleness).

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "ps_options.h"
#include "ps_protocol.h"
#include "ps_server_figures.h"
#include "strata/sdk/roles.h"

namespace strata::ps {

class PsServer {
 public:
  PsServer(const PsOptions& options, RoleContext& context);
  ~PsServer();
  // Serves until the launcher stops the role (RoleContext::stopRequested).
  void run();

  // For in-process tests: binds and publishes the endpoint (run() calls it), then serves one poll round.
  void start();
  void serveOnce(int timeoutMs);
  std::int64_t version() const { return version_; }

 private:
  struct WorkerState {
    std::uint64_t lastSequence = 0;
    std::int64_t clock = 0;  // pushes applied
    bool waiting = false;    // its answer is held (sync round or ssp bound)
    zmq::message_t identity;
    Header request;
    double stalenessSum = 0;
    std::int64_t stalenessMax = 0;
    std::int64_t pushes = 0;
    Tensor pulledValues;                // DC-ASGD: the values this worker computed its next gradient on (bytes)
    std::vector<Tensor> latestBuffers;  // async/ssp, server 0: this worker's last pushed buffers
    bool departed = false;              // died; the job goes on without it (Note [Departed ranks])
    bool idle = false;                  // done with its epoch's steps (Kind::Idle) until its next push
  };

  void handleRequest();
  void handleZap();
  void reply(zmq::message_t& identity, const Header& request, Kind kind, int staleness);
  void replyError(zmq::message_t& identity, const Header* request, const std::string& message);
  void initialize(const Verdict& verdict, const std::vector<zmq::message_t>& frames, std::size_t firstData);
  void overwrite(const std::vector<zmq::message_t>& frames, std::size_t firstData);
  void restoreState(const std::vector<zmq::message_t>& frames);
  void applySync(WorkerState& worker, const std::vector<zmq::message_t>& frames);
  int applyAsync(WorkerState& worker, const std::vector<zmq::message_t>& frames);
  void releaseHeld();
  void averageLatestBuffers();
  void checkDepartures();
  std::int64_t slowestClock() const;
  void traceLine(const std::string& json);
  void afterUpdate();
  void loadCheckpoint();
  void allocate();
  std::string statsJson() const;

  PsOptions options_;
  RoleContext& context_;
  // Note [Server I/O threads]: ZeroMQ gives each connection to one I/O thread; one thread per worker (at most 4)
  // moves the workers' pushes and answers in parallel. ResNet-18, 2 workers (bench/ps_step.py, 2 cores): 1 thread
  // 101-103 ms a sync step, 2 threads 90-92 ms.
  zmq::context_t zmq_;
  zmq::socket_t router_;
  zmq::socket_t zap_;
  std::string publicKey_;
  ServerView view_;
  std::vector<Tensor> values_;     // per segment, category Parameters
  std::vector<Tensor> gradients_;  // per segment, category Gradients (the round's sum in sync)
  std::vector<Tensor> buffers_;    // server 0: the buffers' values
  std::vector<Tensor> bufferSums_;
  std::unique_ptr<SliceOptimizer> optimizer_;
  std::vector<WorkerState> workers_;
  std::vector<std::pair<zmq::message_t, Header>> heldPulls_;  // pulls that arrived before the init
  std::int64_t version_ = 0;
  int arrived_ = 0;  // sync: pushes in the current round
  double roundLr_ = 0;
  std::int64_t refused_ = 0;
  std::int64_t rejected_ = 0;
  std::unique_ptr<std::ofstream> trace_;
  bool started_ = false;
  std::chrono::steady_clock::time_point lastDepartureCheck_{};
  bool storeGone_ = false;  // Note [Store gone at the end]
  // Note [PS recovery]
  std::string checkpointPath_;  // empty: no checkpoints
  std::string jobId_;
  std::int64_t restarts_ = 0;
  std::int64_t replayedPushes_ = 0;         // pushes answered again without being applied (resent after a restart)
  std::vector<std::uint64_t> durable_;      // per worker: its last sequence the latest checkpoint holds
  std::unique_ptr<ServerFigures> figures_;  // Note [PS server memory]
  // Note [Rejoining workers]: in sync mode, when the launcher may restart workers (STRATA_RANK_MAX_RESTARTS > 0),
  // the values (and buffers) before the last update, for a restarted worker that must recompute that round.
  bool keepPrevious_ = false;
  bool hasPrevious_ = false;
  std::vector<Tensor> previous_;
  std::vector<Tensor> previousBuffers_;
};

}  // namespace strata::ps
