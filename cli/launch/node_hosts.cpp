#include "launch/node_hosts.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "strata/comm/tcp_store.h"
#include "strata/error.h"

namespace strata::cli {
namespace {

std::string shortName(const std::string& host) {
  return host.substr(0, host.find('.'));
}

// "node 0 'alpha', node 1 'beta'"
std::string describeHosts(const std::vector<std::string>& nodeHosts) {
  std::vector<std::string> parts;
  for (std::size_t n = 0; n < nodeHosts.size(); ++n) {
    parts.push_back(fmt::format("node {} '{}'", n, nodeHosts[n]));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

std::string nodeHostKey(int nodeRank) {
  return fmt::format("launcher/host/{}", nodeRank);
}

std::string publishedHostName() {
  const char* test = std::getenv("STRATA_TEST_HOST_NAME");
  if (test != nullptr && test[0] != '\0') {
    return test;
  }
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') {
    fail("cannot read this node's host name (gethostname), which the job's role placement by host needs");
  }
  return name;
}

std::vector<int> placeByHost(const RoleRequest& role, const std::vector<std::string>& nodeHosts) {
  std::vector<int> placed;
  for (std::size_t index = 0; index < role.hosts.size(); ++index) {
    const std::string& wanted = role.hosts[index];
    auto node = std::find(nodeHosts.begin(), nodeHosts.end(), wanted);
    if (node == nodeHosts.end()) {
      node = std::find_if(nodeHosts.begin(), nodeHosts.end(),
                          [&](const std::string& host) { return shortName(host) == shortName(wanted); });
    }
    if (node == nodeHosts.end()) {
      fail(
          "role '{}' process {} is placed on host '{}', but no node of the job has that host name; the job's nodes: "
          "{} (a strategy option such as the parameter server's server_hosts= names them)",
          role.name, index, wanted, describeHosts(nodeHosts));
    }
    placed.push_back(static_cast<int>(node - nodeHosts.begin()));
  }
  return placed;
}

NodeHosts::NodeHosts(Options options) : options_(std::move(options)) {
  thread_ = std::thread([this] { gather(); });
}

NodeHosts::~NodeHosts() {
  stop_ = true;
  thread_.join();
}

std::optional<std::vector<std::string>> NodeHosts::hosts() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_.empty()) {
    fail("{}", error_);
  }
  return hosts_;
}

void NodeHosts::gather() {
  // Short steps (a connection attempt, a wait), so the destructor never waits long for this thread.
  constexpr auto kStep = std::chrono::milliseconds(200);
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  std::vector<std::string> keys;
  for (int n = 0; n < options_.nodes; ++n) {
    keys.push_back(nodeHostKey(n));
  }
  const auto options = [&](std::chrono::milliseconds timeout) {
    return TcpStoreOptions{.host = options_.masterAddr,
                           .port = static_cast<std::uint16_t>(options_.masterPort),
                           .isServer = false,
                           .timeout = timeout};
  };
  try {
    // Rank 0 serves the store and may start after this launcher: try in short attempts until it answers, then
    // talk to it with the job's timeout.
    for (bool up = false; !up;) {
      try {
        TcpStore probe(options(std::chrono::seconds(1)));
        up = true;
      } catch (const Error& e) {
        if (stop_) {
          return;
        }
        if (std::chrono::steady_clock::now() >= deadline) {
          fail("node {}: cannot reach the job's store at {}:{} to publish its host name: {}", options_.nodeRank,
               options_.masterAddr, options_.masterPort, e.what());
        }
      }
    }
    TcpStore store(options(options_.timeout));
    store.setString(nodeHostKey(options_.nodeRank), options_.hostName);
    for (std::vector<std::string> missing = keys; !missing.empty(); missing = store.tryWait(keys, kStep)) {
      if (stop_) {
        return;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        std::vector<std::string> nodes;
        for (const std::string& key : missing) {
          nodes.push_back(key.substr(key.rfind('/') + 1));
        }
        fail(
            "node {}: node(s) {} did not publish their host names (launcher/host/N) within {:g} s; is their "
            "launcher running?",
            options_.nodeRank, fmt::join(nodes, ", "), std::chrono::duration<double>(options_.timeout).count());
      }
    }
    std::vector<std::string> hosts;
    for (const std::string& key : keys) {
      hosts.push_back(store.getString(key, options_.timeout));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    hosts_ = std::move(hosts);
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = e.what();
  }
}

}  // namespace strata::cli
