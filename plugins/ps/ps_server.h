#pragma once

// One parameter server (`strata ps-server`, the `ps` strategy's role), in three layers: this class is the transport
// loop (ZeroMQ, CURVE's ZAP handler, validation, dispatch by kind, replies); the update rule (ps_update_rule.h,
// Note [PS modes]) holds the server's key ranges (Note [PS keys]) and their optimizer state and decides when a push
// is answered; recovery (ps_recovery.h, Note [PS recovery]) writes and reloads its checkpoints.

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
#include "ps_recovery.h"
#include "ps_server_figures.h"
#include "ps_update_rule.h"
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
  std::int64_t version() const { return rule_.version(); }

 private:
  // The transport's view of a worker: where its held answer goes, and the idempotence of its pushes.
  struct WorkerLink {
    std::uint64_t lastSequence = 0;
    zmq::message_t identity;  // the connection that asked last
    Header request;           // its last push
  };

  void handleRequest();
  void handlePush(zmq::message_t& identity, const Header& header, std::span<const Frame> data);
  void handleZap();
  void answer(const std::vector<Release>& due);
  void reply(zmq::message_t& identity, const Header& request, Kind kind, int staleness);
  void replyError(zmq::message_t& identity, const Header* request, const std::string& message);
  void initialize(const Verdict& verdict, std::span<const Frame> data);
  void restoreState(const std::vector<zmq::message_t>& frames);
  void checkDepartures();
  void traceLine(const std::string& json);
  void loadCheckpoint();
  void allocate();
  std::vector<std::uint64_t> lastSequences() const;
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
  std::vector<WorkerLink> links_;
  std::vector<std::pair<zmq::message_t, Header>> heldPulls_;  // pulls that arrived before the init
  std::int64_t refused_ = 0;
  std::int64_t rejected_ = 0;
  std::int64_t replayedPushes_ = 0;  // pushes answered again without being applied (resent after a restart)
  std::unique_ptr<std::ofstream> trace_;
  bool started_ = false;
  std::chrono::steady_clock::time_point lastDepartureCheck_{};
  bool storeGone_ = false;                  // Note [Store gone at the end]
  std::unique_ptr<ServerFigures> figures_;  // Note [PS server memory]
  ServerRecovery recovery_;
  UpdateRule rule_;
};

}  // namespace strata::ps
