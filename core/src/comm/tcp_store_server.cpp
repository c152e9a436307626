#include "tcp_store_server.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
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
  thread_ = std::thread([this] { run(); });
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
    if (!waiters_.empty()) {
      auto next = waiters_.front().deadline;
      for (const Waiter& w : waiters_) {
        next = std::min(next, w.deadline);
      }
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(next - std::chrono::steady_clock::now());
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
    answerWaiters();
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
    while (buffer.size() >= 4) {
      Bytes header(buffer.begin(), buffer.begin() + 4);
      const std::uint32_t size = FrameReader(header).u32();
      if (size > kMaxFrameBytes) {
        return false;
      }
      if (buffer.size() < 4 + static_cast<std::size_t>(size)) {
        break;
      }
      Bytes payload(buffer.begin() + 4, buffer.begin() + 4 + size);
      buffer.erase(buffer.begin(), buffer.begin() + 4 + size);
      handle(fd, payload);
    }
  } catch (const std::exception& e) {
    spdlog::warn("store server: dropping a client: {}", e.what());
    return false;
  }
  return true;
}

std::vector<std::string> TcpStoreServer::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const std::string& key : keys) {
    if (!data_.contains(key)) {
      out.push_back(key);
    }
  }
  return out;
}

void TcpStoreServer::handle(int fd, const Bytes& payload) {
  FrameReader in(payload);
  const auto command = static_cast<StoreCommand>(in.u8());
  Bytes out;
  switch (command) {
    case StoreCommand::Set: {
      std::string key = in.string();
      data_[std::move(key)] = in.bytes();
      reply(fd, out);
      answerWaiters();
      return;
    }
    case StoreCommand::Get: {
      const auto it = data_.find(in.string());
      putU8(out, it != data_.end() ? 1 : 0);
      putBytes(out, it != data_.end() ? it->second : Bytes{});
      reply(fd, out);
      return;
    }
    case StoreCommand::Add: {
      std::string key = in.string();
      const std::int64_t delta = in.i64();
      Bytes& stored = data_[key];
      std::int64_t value = 0;
      if (!stored.empty()) {
        const char* begin = reinterpret_cast<const char*>(stored.data());
        const auto [end, ec] = std::from_chars(begin, begin + stored.size(), value);
        STRATA_CHECK(ec == std::errc() && end == begin + stored.size(), "key '{}' does not hold a counter", key);
      }
      value += delta;
      const std::string text = std::to_string(value);
      stored.assign(text.begin(), text.end());
      putI64(out, value);
      reply(fd, out);
      answerWaiters();
      return;
    }
    case StoreCommand::Check: {
      std::vector<std::string> keys(in.u32());
      for (std::string& key : keys) {
        key = in.string();
      }
      putU8(out, missing(keys).empty() ? 1 : 0);
      reply(fd, out);
      return;
    }
    case StoreCommand::Wait: {
      const std::int64_t timeoutMs = in.i64();
      std::vector<std::string> keys(in.u32());
      for (std::string& key : keys) {
        key = in.string();
      }
      waiters_.push_back(
          {fd, std::move(keys), std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs)});
      answerWaiters();
      return;
    }
  }
  fail("unknown store command {}", static_cast<int>(command));
}

void TcpStoreServer::answerWaiters() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::pair<int, Bytes>> replies;
  std::erase_if(waiters_, [&](const Waiter& w) {
    const std::vector<std::string> left = missing(w.keys);
    if (!left.empty() && now < w.deadline) {
      return false;
    }
    Bytes out;
    putU32(out, static_cast<std::uint32_t>(left.size()));
    for (const std::string& key : left) {
      putString(out, key);
    }
    replies.emplace_back(w.fd, std::move(out));
    return true;
  });
  for (const auto& [fd, out] : replies) {
    reply(fd, out);
  }
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
  std::erase_if(waiters_, [fd](const Waiter& w) { return w.fd == fd; });
  clients_.erase(fd);
  ::close(fd);
}

}  // namespace strata::detail
