#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "store_protocol.h"

namespace strata::detail {

// The TcpStore server's state and its handling of requests, apart from the sockets: TcpStoreServer feeds it the
// payloads it reads and sends the replies it is handed; the fuzz target tests/fuzz/store_protocol_fuzzer.cpp
// feeds it arbitrary bytes the same way. Clients are named by an int (the server's socket).
class StoreRequests {
 public:
  using Clock = std::chrono::steady_clock;
  // Called with a client and a reply payload (unframed).
  using Reply = std::function<void(int client, const Bytes& payload)>;

  explicit StoreRequests(Reply reply) : reply_(std::move(reply)) {}

  // Serves one request payload of `client`; throws Error on a malformed one (the server then drops the client).
  void handle(int client, const Bytes& payload, Clock::time_point now);
  // Answers the waiters whose keys all exist or whose deadline has passed by `now`.
  void answerWaiters(Clock::time_point now);
  // Forgets a client's parked waits.
  void dropClient(int client);
  // The earliest deadline of a parked wait, if any.
  std::optional<Clock::time_point> nextDeadline() const;

 private:
  struct Waiter {
    int client;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };

  std::vector<std::string> missing(const std::vector<std::string>& keys) const;

  Reply reply_;
  std::unordered_map<std::string, Bytes> data_;
  std::vector<Waiter> waiters_;
};

// Takes the next whole frame's payload off the front of a client's received bytes; nullopt while the frame is
// incomplete. Throws Error on a frame longer than kMaxFrameBytes.
std::optional<Bytes> takeFrame(Bytes& received);

}  // namespace strata::detail
