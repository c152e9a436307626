#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "store_protocol.h"

namespace strata::detail {

// The server half of TcpStore: one thread polling the listening socket, the clients and a wake-up pipe. All state
// is owned by that thread; blocking waits are parked as waiters and answered when their keys arrive or their
// deadline passes, so one slow client never blocks the others.
class TcpStoreServer {
 public:
  // Listens on every IPv4 address at `port` (0: a free port).
  explicit TcpStoreServer(std::uint16_t port);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  std::uint16_t port() const { return port_; }

 private:
  struct Waiter {
    int fd;
    std::vector<std::string> keys;
    std::chrono::steady_clock::time_point deadline;
  };

  void run();
  void acceptClient();
  // Reads what is available from a client; false when it closed or misbehaved.
  bool readClient(int fd);
  void handle(int fd, const Bytes& payload);
  // Answers the waiters whose keys all exist or whose deadline passed.
  void answerWaiters();
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  // Note [blocking replies]: replies are sent with blocking sends; they are small and every client reads its reply
  // right away, so a send cannot stall the server for long.
  void reply(int fd, const Bytes& payload);
  void dropClient(int fd);

  int listenFd_ = -1;
  int wakeFds_[2] = {-1, -1};
  std::uint16_t port_ = 0;
  std::map<int, Bytes> clients_;  // fd -> bytes received but not yet parsed
  std::unordered_map<std::string, Bytes> data_;
  std::vector<Waiter> waiters_;
  std::thread thread_;
};

}  // namespace strata::detail
