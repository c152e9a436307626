#pragma once

#include <cstdint>
#include <map>
#include <thread>

#include "store_protocol.h"
#include "store_requests.h"

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
  void run();
  void acceptClient();
  // Reads what is available from a client; false when it closed or misbehaved.
  bool readClient(int fd);
  // Note [blocking replies]: replies are sent with blocking sends; they are small and every client reads its reply
  // right away, so a send cannot stall the server for long.
  void reply(int fd, const Bytes& payload);
  void dropClient(int fd);

  int listenFd_ = -1;
  int wakeFds_[2] = {-1, -1};
  std::uint16_t port_ = 0;
  std::map<int, Bytes> clients_;  // fd -> bytes received but not yet parsed
  StoreRequests requests_{[this](int fd, const Bytes& payload) { reply(fd, payload); }};
  std::thread thread_;
};

}  // namespace strata::detail
