#pragma once

// Note [Placing roles by host]: a strategy may place its role processes by host name (RoleRequest::hosts; the
// parameter server's server_hosts=). The node ranks of a job are only known by the launchers, so each node's
// launcher publishes its host name in the job's store (`launcher/host/<node rank>`: gethostname(), or
// STRATA_TEST_HOST_NAME, which the tests set to give the launchers of one machine different names) and, once every
// node's name is there, starts the processes placed on its own name. A name matches a node's exactly, else by the
// short name before the first dot ("node07" matches "node07.cluster"); when several nodes share the name, the lowest
// node rank takes it. A name no node has is an error naming the job's hosts: every launcher reads the same table,
// so every one refuses the job, before any role starts and so before the first training step.

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "strata/sdk/roles.h"

namespace strata::cli {

// The store key under which node `nodeRank`'s launcher publishes its host name.
std::string nodeHostKey(int nodeRank);

// This node's host name as its launcher publishes it (STRATA_TEST_HOST_NAME, else gethostname()).
std::string publishedHostName();

// The node rank that runs each process of `role`, from the node host names by node rank; throws Error naming the
// host no node has, and the job's hosts.
std::vector<int> placeByHost(const RoleRequest& role, const std::vector<std::string>& nodeHosts);

// Publishes this node's host name in the job's store and gathers every node's, on a thread of its own, so the
// launcher keeps serving its ranks meanwhile (the store is rank 0's, which may start after this launcher).
class NodeHosts {
 public:
  struct Options {
    std::string masterAddr;
    int masterPort = 29500;
    int nodes = 1;
    int nodeRank = 0;
    std::string hostName;
    std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  };

  explicit NodeHosts(Options options);
  ~NodeHosts();  // stops waiting and joins (within about a second)
  NodeHosts(const NodeHosts&) = delete;
  NodeHosts& operator=(const NodeHosts&) = delete;

  // Every node's host name by node rank once all have published; nullopt until then. Throws the Error that ended
  // the gathering (the store unreachable, or nodes missing after the timeout, named).
  std::optional<std::vector<std::string>> hosts();

 private:
  void gather();

  Options options_;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::optional<std::vector<std::string>> hosts_;
  std::string error_;
  std::thread thread_;
};

}  // namespace strata::cli
