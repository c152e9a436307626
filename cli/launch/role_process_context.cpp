#include "launch/role_process_context.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <utility>

#include <fmt/format.h>

#include "strata/error.h"
#include "strata/optim/optimizer.h"
#include "strata/optim/optimizer_options_text.h"

namespace strata::cli {
namespace {

// Written by a signal handler: a lock-free atomic is async-signal-safe.
std::atomic<bool> stopFlag{false};
static_assert(std::atomic<bool>::is_always_lock_free);

void raiseStop(int /*signal*/) {
  stopFlag.store(true);
}

}  // namespace

RoleProcessContext::RoleProcessContext(Fields fields, Store& store) : fields_(std::move(fields)), store_(store) {}

bool RoleProcessContext::stopRequested() const {
  if (stopFlag.load() || jobDone_) {
    return true;
  }
  const auto now = std::chrono::steady_clock::now();
  if (now - lastDoneCheck_ < std::chrono::seconds(1)) {
    return false;
  }
  lastDoneCheck_ = now;
  try {
    jobDone_ = store_.check({kJobDoneKey});
    if (jobDone_) {
      fmt::print("role {} {}: the job is done ('{}' in the store); stopping\n", fields_.role, fields_.index,
                 kJobDoneKey);
    }
  } catch (const std::exception& e) {
    // Rank 0 serves the store and leaves last, often before this looks again: without it there is no job to serve
    // (had rank 0 failed, its own exit status says so).
    jobDone_ = true;
    fmt::print("role {} {}: rank 0's store has closed, the job is over; stopping ({})\n", fields_.role, fields_.index,
               e.what());
  }
  return jobDone_;
}

std::unique_ptr<SliceOptimizer> RoleProcessContext::createOptimizer(std::vector<ParameterSlice> slices) {
  const OptimizerOptions options = optimizerOptionsFromText(store_.getString(kRunOptimizerKey, fields_.timeout));
  if (options.maxGradNorm > 0) {
    fail(
        "role {} {}: --clip-grad-norm needs the global gradient norm, which a role holding a part of the "
        "parameters cannot compute; train without it",
        fields_.role, fields_.index);
  }
  return std::make_unique<Optimizer>(std::move(slices), options);
}

// Note [role stop signals]: no SA_RESTART, so a role blocked in accept() or poll() returns with EINTR and can see
// the flag at once; SA_RESETHAND restores the default action, so a second signal ends a role that never looks.
void RoleProcessContext::installStopHandlers() {
  struct sigaction action {};
  action.sa_handler = raiseStop;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
}

// A UDP "connect" sends nothing; it only asks the kernel which local address it would route from.
std::string localAddressTowards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* result = nullptr;
  std::string address;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result) == 0) {
    for (addrinfo* ai = result; ai != nullptr && address.empty(); ai = ai->ai_next) {
      const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        continue;
      }
      sockaddr_storage local{};
      socklen_t length = sizeof(local);
      char text[INET6_ADDRSTRLEN] = {};
      if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
          ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0 &&
          ::getnameinfo(reinterpret_cast<sockaddr*>(&local), length, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) ==
              0) {
        address = text;
      }
      ::close(fd);
    }
    ::freeaddrinfo(result);
  }
  if (address.empty()) {
    char name[256] = {};
    if (::gethostname(name, sizeof(name) - 1) == 0) {
      address = name;
    }
  }
  return address.empty() ? "127.0.0.1" : address;
}

}  // namespace strata::cli
