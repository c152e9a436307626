#pragma once

// A worker's connections to the parameter servers: one DEALER per server, requests sent to every server before
// any answer is awaited, so the servers work in parallel. A server that falls silent is looked up again in the
// store: when a restarted one has published a new endpoint, the client reconnects and reports the restart, and the
// strategy resends what the server lost (Note [PS recovery]).

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "ps_options.h"
#include "ps_protocol.h"
#include "strata/comm/store.h"

namespace strata::ps {

struct Reply {
  Header header;
  std::vector<zmq::message_t> data;
  bool restarted = false;  // the server was restarted: no answer, the request must be replayed
  bool pending = false;    // receiveUntilRestart returned before this server answered
};

class PsClient {
 public:
  PsClient(const PsOptions& options, int worker, Store& store, const std::string& role);

  int servers() const { return static_cast<int>(sockets_.size()); }
  // Sends `kind` to server s with `data` frames after the header; sequence 0 takes the next number. Returns the
  // sequence number sent.
  std::uint64_t send(int server, Kind kind, std::int64_t step, std::int64_t modelVersion, double lr,
                     std::vector<zmq::message_t> data, std::uint32_t flags = 0, std::uint64_t sequence = 0);
  // Waits for every server's answer to its last request. An Error reply, or a server silent for `timeout` that has
  // not been restarted, throws, naming it.
  std::vector<Reply> receiveAll(std::chrono::milliseconds timeout);
  // Waits for server s alone; other servers' answers stay queued for the calls that await them.
  Reply receiveFrom(int server, std::chrono::milliseconds timeout);
  // Like receiveAll over `servers`, but returns as soon as one of them turns out restarted: the caller must replay
  // to it at once, since another server's answer may wait for a worker that waits for that replay (Note [PS
  // recovery]). Servers that had neither answered nor restarted by then are marked pending.
  std::vector<Reply> receiveUntilRestart(const std::vector<std::size_t>& servers, std::chrono::milliseconds timeout);
  int restartsSeen() const { return restartsSeen_; }
  // The sequence number the next request to server s follows (Note [Rejoining workers]: a restarted worker goes on
  // from its dead process's numbers).
  void setLastSequence(int server, std::uint64_t sequence) {
    sequence_.at(static_cast<std::size_t>(server)) = sequence;
  }

 private:
  void connect(std::size_t server);
  bool reconnectIfRestarted(std::size_t server);
  std::vector<Reply> receive(const std::vector<std::size_t>& servers, std::chrono::milliseconds timeout,
                             bool stopOnRestart = false);

  PsOptions options_;
  int worker_;
  Store& store_;
  std::string role_;
  zmq::context_t zmq_;
  std::vector<zmq::socket_t> sockets_;
  std::vector<std::string> endpoints_;
  std::vector<std::uint64_t> sequence_;
  std::vector<std::uint64_t> awaited_;  // the sequence number each server's answer must carry
  std::vector<std::string> pending_;    // what each server was last asked, for messages
  std::string publicKey_;
  std::string secretKey_;
  int restartsSeen_ = 0;
};

}  // namespace strata::ps
