#include "strata/comm/tcp_store.h"

#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "strata/error.h"

namespace strata {
namespace {

using namespace std::chrono_literals;

// A port that was free a moment ago: bind port 0 and read back what the kernel chose.
std::uint16_t freePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TcpStoreOptions optionsFor(int rank, int world, std::uint16_t port, std::chrono::milliseconds timeout) {
  TcpStoreOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  options.isServer = rank == 0;
  options.rank = rank;
  options.worldSize = world;
  options.timeout = timeout;
  return options;
}

TEST(TcpStoreTest, SetGetAddWaitFromFourRanks) {
  const std::uint16_t port = freePort();
  constexpr int kWorld = 4;
  std::vector<std::unique_ptr<TcpStore>> stores(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      // The constructor connects (retrying until rank 0's server is up) and runs the rendezvous.
      auto& store = stores[static_cast<std::size_t>(r)];
      store = std::make_unique<TcpStore>(optionsFor(r, kWorld, port, 10s));
      EXPECT_EQ(store->port(), port);
      for (int i = 0; i < 50; ++i) {
        store->add("counter", 1);
      }
      store->setString("key/" + std::to_string(r), "value " + std::to_string(r));
      std::vector<std::string> keys;
      for (int p = 0; p < kWorld; ++p) {
        keys.push_back("key/" + std::to_string(p));
      }
      store->wait(keys, 10s);
      EXPECT_TRUE(store->check(keys));
      for (int p = 0; p < kWorld; ++p) {
        EXPECT_EQ(store->getString("key/" + std::to_string(p), 1s), "value " + std::to_string(p));
      }
      store->add("done", 1);
      store->wait({"all-done"}, 10s);  // keeps rank 0's server up until everyone finished
    });
  }
  // The test thread acts as a fifth client of rank 0's server (no rendezvous).
  TcpStoreOptions observer;
  observer.port = port;
  observer.timeout = 10s;
  TcpStore store(observer);
  while (store.add("done", 0) < kWorld) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(store.add("counter", 0), kWorld * 50);
  EXPECT_EQ(store.add("rendezvous/joined", 0), kWorld);
  EXPECT_FALSE(store.check({"key/0", "absent"}));
  store.setString("all-done", "1");
  for (std::thread& t : threads) {
    t.join();
  }
  stores.clear();
}

TEST(TcpStoreTest, GetBlocksUntilAnotherClientSetsTheKey) {
  TcpStoreOptions server;
  server.port = 0;  // the server binds a free port
  server.isServer = true;
  server.timeout = 10s;
  TcpStore store(server);
  ASSERT_NE(store.port(), 0);
  TcpStoreOptions client;
  client.port = store.port();
  client.timeout = 10s;
  std::thread setter([&] {
    TcpStore other(client);
    std::this_thread::sleep_for(50ms);
    other.set("late", {1, 2, 3});
  });
  EXPECT_EQ(store.get("late", 10s), (Store::Bytes{1, 2, 3}));
  setter.join();
  EXPECT_EQ(store.tryWait({"late", "b"}, 20ms), (std::vector<std::string>{"b"}));
  try {
    store.get("never", 50ms);
    FAIL() << "get should time out";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos) << e.what();
  }
  // The connection stays usable after a timed-out wait.
  EXPECT_EQ(store.add("n", 2), 2);
}

TEST(TcpStoreTest, RendezvousTimeoutNamesTheRanksThatNeverArrived) {
  const std::uint16_t port = freePort();
  std::vector<std::string> messages(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      // Rank 0 (the server) waits longer so that rank 1 sees its own timeout, not the server going away.
      const auto timeout = r == 0 ? 1500ms : 500ms;
      try {
        TcpStore store(optionsFor(r, 3, port, timeout));
      } catch (const Error& e) {
        messages[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  const std::string where = "rendezvous at 127.0.0.1:" + std::to_string(port);
  EXPECT_EQ(messages[0], where + " timed out after 1.5 s: rank 2 of 3 never arrived");
  EXPECT_EQ(messages[1], where + " timed out after 0.5 s: rank 2 of 3 never arrived");
}

TEST(TcpStoreTest, ConnectGivesUpAfterTheTimeout) {
  TcpStoreOptions options;
  options.port = freePort();  // nobody listens there
  options.timeout = 200ms;
  try {
    TcpStore store(options);
    FAIL() << "connect should fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not connect to the store at 127.0.0.1:"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata
