#include "tcp_store_server.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "strata/error.h"
#include "strata/thread_names.h"

namespace strata::detail {

TcpStoreServer::TcpStoreServer(std::uint16_t port) {
  listenFd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  STRATA_CHECK(listenFd_ >= 0, "store server: socket failed: {}", std::strerror(errno));
  const int one = 1;
  ::setsockopt(listenFd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(port);
  if (::bind(listenFd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listenFd_, 128) != 0) {
    const int err = errno;
    ::close(listenFd_);
    fail("store server cannot listen on port {}: {}", port, std::strerror(err));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(listenFd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  if (::pipe2(wakeFds_, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(listenFd_);
    fail("store server: pipe failed: {}", std::strerror(err));
  }
  thread_ = std::thread([this] {
    nameThisThread(kCommunicationThread);  // every collective records its arrival here
    run();
  });
}

TcpStoreServer::~TcpStoreServer() {
  const char byte = 'x';
  [[maybe_unused]] const ssize_t n = ::write(wakeFds_[1], &byte, 1);
  thread_.join();
  for (const auto& [fd, buffer] : clients_) {
    ::close(fd);
  }
  ::close(listenFd_);
  ::close(wakeFds_[0]);
  ::close(wakeFds_[1]);
}

void TcpStoreServer::run() {
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({wakeFds_[0], POLLIN, 0});
    fds.push_back({listenFd_, POLLIN, 0});
    for (const auto& [fd, buffer] : clients_) {
      fds.push_back({fd, POLLIN, 0});
    }
    int timeoutMs = -1;
    if (const auto next = requests_.nextDeadline()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*next - std::chrono::steady_clock::now());
      timeoutMs = static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 60'000));
    }
    const int ready = ::poll(fds.data(), fds.size(), timeoutMs);
    if (ready < 0 && errno != EINTR) {
      spdlog::error("store server: poll failed: {}", std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) {
      return;  // shutdown
    }
    if (fds[1].revents & POLLIN) {
      acceptClient();
    }
    for (std::size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents != 0 && !readClient(fds[i].fd)) {
        dropClient(fds[i].fd);
      }
    }
    requests_.answerWaiters(std::chrono::steady_clock::now());
  }
}

void TcpStoreServer::acceptClient() {
  const int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    return;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  clients_[fd];
}

bool TcpStoreServer::readClient(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) {
    return true;  // dropped earlier in this round
  }
  std::uint8_t chunk[65536];
  const ssize_t n = ::recv(fd, chunk, sizeof(chunk), MSG_DONTWAIT);
  if (n == 0) {
    return false;
  }
  if (n < 0) {
    return errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK;
  }
  Bytes& buffer = it->second;
  buffer.insert(buffer.end(), chunk, chunk + n);
  try {
    while (std::optional<Bytes> payload = takeFrame(buffer)) {
      requests_.handle(fd, *payload, std::chrono::steady_clock::now());
    }
  } catch (const std::exception& e) {
    spdlog::warn("store server: dropping a client: {}", e.what());
    return false;
  }
  return true;
}

void TcpStoreServer::reply(int fd, const Bytes& payload) {
  try {
    sendAll(fd, frame(payload));
  } catch (const std::exception& e) {
    // The client went away; its socket is dropped when poll reports it.
    spdlog::debug("store server: reply failed: {}", e.what());
  }
}

void TcpStoreServer::dropClient(int fd) {
  requests_.dropClient(fd);
  clients_.erase(fd);
  ::close(fd);
}

}  // namespace strata::detail
