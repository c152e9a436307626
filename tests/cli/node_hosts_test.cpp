// The launcher's placement of role processes by host name (cli/launch/node_hosts.h, Note [Placing roles by host]): the
// matching rules, and the gathering of every node's name through a real store.
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "launch/node_hosts.h"
#include "strata/comm/tcp_store.h"
#include "strata/error.h"

namespace strata::cli {
namespace {

RoleRequest placedOn(std::vector<std::string> hosts) {
  return RoleRequest{.name = "ps-server", .count = static_cast<int>(hosts.size()), .hosts = std::move(hosts)};
}

TEST(NodeHostsTest, PlacesByExactOrShortNameOnTheLowestNodeOfAName) {
  const std::vector<std::string> nodes = {"alpha", "beta.cluster.org", "gamma", "gamma", "delta.lab"};
  EXPECT_EQ(placeByHost(placedOn({"gamma", "alpha", "beta.cluster.org"}), nodes), (std::vector<int>{2, 0, 1}));
  // "beta" is node 1's short name; "alpha.cluster.org" is node 0's long one; an exact name wins over a short one.
  EXPECT_EQ(placeByHost(placedOn({"beta", "alpha.cluster.org", "delta.lab"}), nodes), (std::vector<int>{1, 0, 4}));
  EXPECT_TRUE(placeByHost(placedOn({}), nodes).empty());
}

TEST(NodeHostsTest, AnUnknownHostNamesTheJobsHosts) {
  try {
    placeByHost(placedOn({"alpha", "omega"}), {"alpha", "beta"});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("role 'ps-server' process 1 is placed on host 'omega', but no node of the "
                                         "job has that host name; the job's nodes: node 0 'alpha', node 1 'beta'"),
              std::string::npos)
        << e.what();
  }
}

NodeHosts::Options nodeOptions(int port, int nodes, int node, std::string host, std::chrono::milliseconds timeout) {
  return NodeHosts::Options{.masterAddr = "127.0.0.1",
                            .masterPort = port,
                            .nodes = nodes,
                            .nodeRank = node,
                            .hostName = std::move(host),
                            .timeout = timeout};
}

std::optional<std::vector<std::string>> waitForHosts(NodeHosts& hosts, std::chrono::seconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto all = hosts.hosts()) {
      return all;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::nullopt;
}

TEST(NodeHostsTest, EveryLauncherGathersEveryNodesName) {
  TcpStore server(TcpStoreOptions{.port = 0, .isServer = true, .timeout = std::chrono::seconds(10)});
  NodeHosts node0(nodeOptions(server.port(), 2, 0, "alpha", std::chrono::seconds(10)));
  EXPECT_FALSE(node0.hosts().has_value()) << "node 1 has not published yet";
  NodeHosts node1(nodeOptions(server.port(), 2, 1, "beta", std::chrono::seconds(10)));
  EXPECT_EQ(waitForHosts(node0, std::chrono::seconds(10)), (std::vector<std::string>{"alpha", "beta"}));
  EXPECT_EQ(waitForHosts(node1, std::chrono::seconds(10)), (std::vector<std::string>{"alpha", "beta"}));
  EXPECT_EQ(server.getString(nodeHostKey(1), std::chrono::seconds(1)), "beta");
}

TEST(NodeHostsTest, ANodeThatNeverPublishesIsNamedAfterTheTimeout) {
  TcpStore server(TcpStoreOptions{.port = 0, .isServer = true, .timeout = std::chrono::seconds(10)});
  NodeHosts node0(nodeOptions(server.port(), 3, 0, "alpha", std::chrono::milliseconds(600)));
  NodeHosts node2(nodeOptions(server.port(), 3, 2, "gamma", std::chrono::milliseconds(600)));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  try {
    node0.hosts();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 0: node(s) 1 did not publish their host names"), std::string::npos)
        << e.what();
  }
}

TEST(NodeHostsTest, StopsWaitingForAStoreThatIsNotThereWhenDestroyed) {
  const auto start = std::chrono::steady_clock::now();
  {
    NodeHosts waiting(nodeOptions(1, 2, 0, "alpha", std::chrono::minutes(5)));  // port 1: nothing listens
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_FALSE(waiting.hosts().has_value());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace strata::cli
