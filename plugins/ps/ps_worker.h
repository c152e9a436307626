#pragma once

// A worker's key-value API to the parameter servers, after ps-lite's KVWorker: push, pull and idle send a request to
// every server and return a ticket at once; wait(ticket) returns every server's answer. Underneath it keeps what
// Note [PS recovery] needs: each push stays retained (copied) until the server's checkpoint holds it, and a server
// found restarted while a ticket is awaited gets the pushes it may lack replayed, in order, before the request is
// answered. The strategy (ps_strategy.cpp) deals in its flat buffers' slices and tickets, never in frames.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ps_client.h"
#include "ps_options.h"
#include "ps_protocol.h"

namespace strata::ps {

using Ticket = std::uint64_t;

class PsWorker {
 public:
  using AddFigure = std::function<void(const std::string& name, double amount)>;
  // Called after a push was sent to server s (a test hook ends the process between two servers).
  using AfterSend = std::function<void(int server)>;

  // `addFigure` counts ps_server_restarts_seen and ps_pushes_replayed in the run's figures.
  PsWorker(const PsOptions& options, int worker, Store& store, const std::string& role, AddFigure addFigure);

  int servers() const { return client_->servers(); }

  // Pushes `data[s]` (server s's gradient slices, then its buffers) with the version each server last answered. The
  // bytes are sent as they are (Note [PS zero copy]: they must not change until wait returns) or, with
  // checkpoint_every, copied and retained for replay.
  Ticket push(std::int64_t step, double lr, const std::vector<std::vector<std::span<const std::byte>>>& data,
              const AfterSend& afterSend = {});
  // The servers' current values (a pull waits on a server for its Init).
  Ticket pull();
  // async and ssp: no more pushes this epoch; the servers stop holding the others for this worker.
  Ticket idle();
  // Every server's answer to the ticket's requests, replaying to a restarted server first. Each Params answer
  // updates the version this worker's next push reports, and releases the retained pushes its checkpoint holds.
  std::vector<Reply> wait(Ticket ticket);

  // Rank 0: the layout and initial values (`data[s]`, copied when sent); `overwrite` replaces the values of servers
  // that hold some already (a resumed run). Answered with the values.
  Ticket init(const std::vector<std::vector<std::span<const std::byte>>>& data, bool overwrite);
  // Requests that a restarted server does not get again: StateRequest and RestoreState (rank 0's checkpoints) and
  // Rejoin (a restarted worker). `data[s]` holds server s's frames (copied when sent), or is empty.
  Ticket request(Kind kind, const std::vector<std::vector<std::span<const std::byte>>>& data = {});

  // Note [Rejoining workers]: where a restarted worker's sequence numbers and versions go on from.
  void setLastSequence(int server, std::uint64_t sequence) { client_->setLastSequence(server, sequence); }
  void setVersion(int server, std::int64_t version) { versions_.at(static_cast<std::size_t>(server)) = version; }

 private:
  struct RetainedPush {
    std::uint64_t sequence = 0;
    std::int64_t step = 0;
    std::int64_t modelVersion = 0;
    double lr = 0;
    std::vector<std::vector<char>> frames;
  };
  enum class Awaited { Push, Pull, Idle, Other };

  Ticket issue(Awaited awaited);
  Ticket send(Kind kind, const std::vector<std::vector<std::span<const std::byte>>>& data, std::uint32_t flags,
              Awaited awaited);
  static std::vector<zmq::message_t> framesOf(RetainedPush& push);
  std::vector<Reply> receiveReplaying();
  Reply replay(int s);
  void account(const std::vector<Reply>& replies);

  PsOptions options_;
  int worker_;
  AddFigure addFigure_;
  std::unique_ptr<PsClient> client_;
  std::vector<std::int64_t> versions_;              // per server: the version of its last Params answer
  std::vector<std::deque<RetainedPush>> retained_;  // per server (Note [PS recovery])
  Ticket ticket_ = 0;                               // the last issued; only it can be awaited
  bool awaiting_ = false;
  Awaited awaited_ = Awaited::Other;
};

}  // namespace strata::ps
