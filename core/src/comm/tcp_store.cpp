#include "strata/comm/tcp_store.h"

#include <cerrno>
#include <cstring>
#include <thread>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "store_protocol.h"
#include "strata/comm/rendezvous.h"
#include "strata/error.h"
#include "tcp_store_server.h"

namespace strata {

using detail::FrameReader;
using detail::StoreCommand;

namespace {

double seconds(std::chrono::milliseconds d) {
  return static_cast<double>(d.count()) / 1000.0;
}

// One connection attempt to every address of host:port; returns the socket or -1 with `error` set.
int tryConnect(const std::string& host, std::uint16_t port, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) {
    error = ::gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      break;
    }
    error = std::strerror(errno);
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(result);
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

}  // namespace

TcpStore::TcpStore(TcpStoreOptions options) : options_(std::move(options)), port_(options_.port) {
  if (options_.isServer) {
    server_ = std::make_unique<detail::TcpStoreServer>(options_.port);
    port_ = server_->port();
  }
  connectWithRetries();
  if (options_.worldSize > 0 && options_.rank >= 0) {
    RendezvousOptions rv;
    rv.rank = options_.rank;
    rv.worldSize = options_.worldSize;
    rv.timeout = options_.timeout;
    rv.where = address();
    try {
      rendezvous(*this, rv);
    } catch (...) {
      ::close(fd_);
      fd_ = -1;
      throw;  // server_ shuts down through its destructor
    }
  }
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
  // server_ (if any) stops its thread and closes the remaining connections.
}

std::string TcpStore::localAddress() const {
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&local), &length) != 0) {
    fail("store connection to {}: cannot read its local address: {}", address(), std::strerror(errno));
  }
  char text[INET6_ADDRSTRLEN] = {0};
  const void* bytes = local.ss_family == AF_INET6
                          ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&local)->sin6_addr)
                          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&local)->sin_addr);
  STRATA_CHECK(::inet_ntop(local.ss_family, bytes, text, sizeof(text)) != nullptr,
               "store connection to {}: its local address is neither IPv4 nor IPv6", address());
  return text;
}

std::string TcpStore::address() const {
  return options_.host + ":" + std::to_string(port_);
}

void TcpStore::connectWithRetries() {
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  auto backoff = std::chrono::milliseconds(10);
  std::string error;
  while (true) {
    fd_ = tryConnect(options_.host, port_, error);
    if (fd_ >= 0) {
      return;
    }
    if (std::chrono::steady_clock::now() + backoff >= deadline) {
      fail("could not connect to the store at {} within {:g} s: {}", address(), seconds(options_.timeout), error);
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

std::vector<std::uint8_t> TcpStore::request(const std::vector<std::uint8_t>& payload,
                                            std::chrono::milliseconds responseTimeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  STRATA_CHECK(fd_ >= 0, "store at {} is not connected", address());
  try {
    detail::sendAll(fd_, detail::frame(payload));
    return detail::recvFrame(fd_, std::chrono::steady_clock::now() + responseTimeout);
  } catch (const Error& e) {
    // Note [broken connection]: after a failed or timed-out request the stream may hold a late reply; close it so
    // that no later request reads a reply meant for another.
    ::close(fd_);
    fd_ = -1;
    fail("store at {}: {}", address(), e.what());
  }
}

void TcpStore::set(const std::string& key, const Bytes& value) {
  Bytes out;
  detail::putU8(out, static_cast<std::uint8_t>(StoreCommand::Set));
  detail::putString(out, key);
  detail::putBytes(out, value);
  request(out, options_.timeout);
}

Store::Bytes TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  const std::vector<std::string> missing = tryWait({key}, timeout);
  STRATA_CHECK(missing.empty(), "store get of key '{}' at {} timed out after {:g} s", key, address(), seconds(timeout));
  Bytes out;
  detail::putU8(out, static_cast<std::uint8_t>(StoreCommand::Get));
  detail::putString(out, key);
  const Bytes reply = request(out, options_.timeout);
  FrameReader in(reply);
  STRATA_CHECK(in.u8() == 1, "store key '{}' at {} vanished", key, address());
  return in.bytes();
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) {
  Bytes out;
  detail::putU8(out, static_cast<std::uint8_t>(StoreCommand::Add));
  detail::putString(out, key);
  detail::putI64(out, delta);
  const Bytes reply = request(out, options_.timeout);
  FrameReader in(reply);
  return in.i64();
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  Bytes out;
  detail::putU8(out, static_cast<std::uint8_t>(StoreCommand::Check));
  detail::putU32(out, static_cast<std::uint32_t>(keys.size()));
  for (const std::string& key : keys) {
    detail::putString(out, key);
  }
  const Bytes reply = request(out, options_.timeout);
  FrameReader in(reply);
  return in.u8() == 1;
}

std::vector<std::string> TcpStore::tryWait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  Bytes out;
  detail::putU8(out, static_cast<std::uint8_t>(StoreCommand::Wait));
  detail::putI64(out, timeout.count());
  detail::putU32(out, static_cast<std::uint32_t>(keys.size()));
  for (const std::string& key : keys) {
    detail::putString(out, key);
  }
  // The server answers at its deadline; allow for the trip on top of it.
  const Bytes reply = request(out, timeout + options_.timeout);
  FrameReader in(reply);
  std::vector<std::string> missing(in.u32());
  for (std::string& key : missing) {
    key = in.string();
  }
  return missing;
}

}  // namespace strata
