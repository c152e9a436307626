// A strategy with a role, for the launcher's role tests (tests/multirank/roles_test.sh): it declares `servers`
// processes of role "echo-server", each answers every line with "echo <index>: <line>", and every worker rank
// checks in setup() that it reaches each of them at the endpoint found through the store.
//
// Options: servers=N (default 1); fail_role=I makes echo-server I throw at once.
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "strata/sdk/strategy.h"

namespace {

using strata::fail;

constexpr const char* kRole = "echo-server";

struct EchoOptions {
  int servers = 1;
  int failRole = -1;
};

int parseCount(const std::string& key, const std::string& value) {
  try {
    std::size_t used = 0;
    const int result = std::stoi(value, &used);
    if (used == value.size() && result >= 0) {
      return result;
    }
  } catch (const std::exception&) {
  }
  fail("echo_role: --strategy-opt {}={} is not a non-negative integer", key, value);
}

EchoOptions parseOptions(const std::map<std::string, std::string>& options) {
  EchoOptions result;
  for (const auto& [key, value] : options) {
    if (key == "servers") {
      result.servers = parseCount(key, value);
    } else if (key == "fail_role") {
      result.failRole = parseCount(key, value);
    } else {
      fail("echo_role: unknown --strategy-opt '{}' (known: servers, fail_role)", key);
    }
  }
  return result;
}

// Closes a descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

void sendAll(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::send(fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      fail("echo_role: send failed: {}", std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
}

// Reads one line (without its newline), waiting at most `timeoutMs` for each piece.
std::string readLine(int fd, int timeoutMs) {
  std::string line;
  char c = 0;
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, timeoutMs) <= 0) {
      fail("echo_role: no reply within {} ms", timeoutMs);
    }
    const ssize_t n = ::recv(fd, &c, 1, 0);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      fail("echo_role: connection closed before a whole line (got '{}')", line);
    }
    if (c == '\n') {
      return line;
    }
    line += c;
  }
}

// Connects to "host:port".
Fd connectTo(const std::string& endpoint) {
  const std::size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos) {
    fail("echo_role: endpoint '{}' is not host:port", endpoint);
  }
  const std::string host = endpoint.substr(0, colon);
  const std::string port = endpoint.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &result); rc != 0) {
    fail("echo_role: cannot resolve {}: {}", endpoint, ::gai_strerror(rc));
  }
  std::string error = "no address";
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (fd.get() >= 0 && ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) {
      ::freeaddrinfo(result);
      return fd;
    }
    error = std::strerror(errno);
  }
  ::freeaddrinfo(result);
  fail("echo_role: cannot connect to {}: {}", endpoint, error);
}

// A listening IPv4 socket on every address and a free port.
Fd listenAnywhere(int& port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (fd.get() < 0 || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(fd.get(), 64) != 0 || ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    fail("echo_role: cannot listen on a free port: {}", std::strerror(errno));
  }
  port = ntohs(address.sin_port);
  return fd;
}

// One echo-server process: serves until the launcher asks it to stop.
void serve(strata::RoleContext& context) {
  int port = 0;
  const Fd listener = listenAnywhere(port);
  const std::string endpoint = fmt::format("{}:{}", context.hostAddress(), port);
  strata::publishRoleEndpoint(context.store(), kRole, context.index(), endpoint);
  fmt::print("{} {} of {} listening at {}\n", kRole, context.index(), context.count(), endpoint);
  std::fflush(stdout);
  std::map<int, std::string> clients;  // connected fd -> bytes of its unfinished line
  while (!context.stopRequested()) {
    std::vector<pollfd> fds{{listener.get(), POLLIN, 0}};
    for (const auto& client : clients) {
      fds.push_back({client.first, POLLIN, 0});
    }
    // A bounded wait, so the stop flag is seen even if the signal lands just before poll().
    if (::poll(fds.data(), fds.size(), 100) <= 0) {
      continue;
    }
    std::vector<int> closed;
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) {
        continue;
      }
      char buffer[4096];
      const ssize_t n = ::recv(fds[i].fd, buffer, sizeof(buffer), 0);
      if (n <= 0) {
        closed.push_back(fds[i].fd);
        continue;
      }
      std::string& text = clients[fds[i].fd];
      text.append(buffer, static_cast<std::size_t>(n));
      for (std::size_t newline; (newline = text.find('\n')) != std::string::npos; text.erase(0, newline + 1)) {
        sendAll(fds[i].fd, fmt::format("echo {}: {}\n", context.index(), text.substr(0, newline)));
      }
    }
    for (const int fd : closed) {
      clients.erase(fd);
      ::close(fd);
    }
    if ((fds[0].revents & POLLIN) != 0) {
      const int client = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (client >= 0) {
        clients.emplace(client, std::string());
      }
    }
  }
  for (const auto& client : clients) {
    ::close(client.first);
  }
  fmt::print("{} {} stopping\n", kRole, context.index());
  std::fflush(stdout);
}

class EchoRoleStrategy final : public strata::Strategy {
 public:
  strata::StrategyRequirements requirements(const strata::StrategyQuery& query) override {
    const EchoOptions options = parseOptions(query.options);
    strata::StrategyRequirements result;
    result.roles.push_back({kRole, options.servers});
    return result;
  }

  void setup(strata::StrategyContext& context) override {
    context_ = &context;
    const EchoOptions options = parseOptions(context.options());
    if (context.store() == nullptr) {
      fail("echo_role: rank {} has no store to find the {} processes in", context.rank(), kRole);
    }
    const int timeoutMs = static_cast<int>(context.timeout().count());
    for (int i = 0; i < options.servers; ++i) {
      const std::string endpoint = strata::lookupRoleEndpoint(*context.store(), kRole, i, context.timeout());
      const Fd fd = connectTo(endpoint);
      const std::string hello = fmt::format("rank {}", context.rank());
      sendAll(fd.get(), hello + "\n");
      const std::string reply = readLine(fd.get(), timeoutMs);
      const std::string expected = fmt::format("echo {}: {}", i, hello);
      if (reply != expected) {
        fail("echo_role: {} {} at {} answered '{}', expected '{}'", kRole, i, endpoint, reply, expected);
      }
      fmt::print("rank {} reached {} {} at {}\n", context.rank(), kRole, i, endpoint);
      std::fflush(stdout);
    }
  }

  void step(const strata::StepInfo& /*at*/, double lr) override { context_->optimizers().full().step(lr); }

  void runRole(strata::RoleContext& context) override {
    if (context.role() != kRole) {
      fail("echo_role declares no role '{}'", context.role());
    }
    if (parseOptions(context.options()).failRole == context.index()) {
      fail("{} {} fails as asked (--strategy-opt fail_role={})", kRole, context.index(), context.index());
    }
    serve(context);
  }

 private:
  strata::StrategyContext* context_ = nullptr;
};

}  // namespace

STRATA_EXPORT_STRATEGY(EchoRoleStrategy, "echo_role", "0.0.1",
                       "test strategy: echo-server roles found through the store")
