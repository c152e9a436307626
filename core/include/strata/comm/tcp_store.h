#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "strata/comm/store.h"

namespace strata {

namespace detail {
class TcpStoreServer;
}

struct TcpStoreOptions {
  // The server's address as the clients reach it (MASTER_ADDR). The server itself listens on every IPv4 address.
  std::string host = "127.0.0.1";
  // MASTER_PORT. A server given port 0 binds a free port; read it back with TcpStore::port().
  std::uint16_t port = 29500;
  // Rank 0 runs the server (a thread inside this process) and is also a client of it.
  bool isServer = false;
  // With worldSize > 0 and rank >= 0 the constructor runs the rendezvous (see rendezvous.h) before returning.
  int worldSize = -1;
  int rank = -1;
  // Bounds connecting (with retries), the rendezvous, and every request.
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
};

// The rendezvous store served by rank 0 at MASTER_ADDR:MASTER_PORT (the role of c10d's TCPStore). Requests are
// length-prefixed frames over one TCP connection per TcpStore; blocking waits are served by the server, so a
// waiting client costs no polling.
//
// Note [store lifetime]: the server lives in rank 0's TcpStore; once rank 0 destroys it, other ranks' requests fail
// with "connection closed". Ranks should finish their store traffic (e.g. a barrier) before rank 0 shuts down.
// Note [one connection]: requests from several threads on one TcpStore are serialised; a long wait() blocks the
// other threads' requests on the same TcpStore until it returns.
class TcpStore final : public Store {
 public:
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  std::vector<std::string> tryWait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

  // The port the server listens on (the bound one when options.port was 0).
  std::uint16_t port() const { return port_; }
  // "host:port", for messages.
  std::string address() const;
  // The IP address of this process's end of the store connection: the local interface that reaches MASTER_ADDR
  // (127.0.0.1 when the master is on this host's loopback). Gloo binds its pairs there (Note [Gloo's address]).
  std::string localAddress() const;

 private:
  // Sends one request frame and returns the response frame; `responseTimeout` bounds the wait for the reply.
  std::vector<std::uint8_t> request(const std::vector<std::uint8_t>& frame, std::chrono::milliseconds responseTimeout);
  void connectWithRetries();

  TcpStoreOptions options_;
  std::unique_ptr<detail::TcpStoreServer> server_;
  std::uint16_t port_ = 0;
  std::mutex mutex_;  // one request at a time on fd_
  int fd_ = -1;
};

}  // namespace strata
