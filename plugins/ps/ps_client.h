#pragma once

// A worker's connections to the parameter servers: one DEALER per server, requests sent to every server before
// any answer is awaited, so the servers work in parallel. Data frames of a push are zero-copy views of the
// gradient buffers (Note [PS zero copy]).

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "ps_options.h"
#include "ps_protocol.h"

namespace strata::ps {

struct Reply {
  Header header;
  std::vector<zmq::message_t> data;
};

class PsClient {
 public:
  PsClient(const PsOptions& options, int worker, const std::vector<std::string>& endpoints);

  int servers() const { return static_cast<int>(sockets_.size()); }
  // Sends `kind` to server s with `data` frames after the header (and the layout frame for Init).
  void send(int server, Kind kind, std::int64_t step, std::int64_t modelVersion, double lr,
            std::vector<zmq::message_t> data, std::uint32_t flags = 0);
  // Waits for every server's answer to its last request; an Error reply or a silent server throws, naming it.
  std::vector<Reply> receiveAll(std::chrono::milliseconds timeout);

 private:
  PsOptions options_;
  int worker_;
  zmq::context_t zmq_;
  std::vector<zmq::socket_t> sockets_;
  std::vector<std::string> endpoints_;
  std::vector<std::uint64_t> sequence_;
  std::vector<std::string> pending_;  // what each server was last asked, for messages
};

}  // namespace strata::ps
