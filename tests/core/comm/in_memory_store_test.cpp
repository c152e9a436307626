#include "strata/comm/in_memory_store.h"

#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "strata/comm/rendezvous.h"
#include "strata/error.h"

namespace strata {
namespace {

using namespace std::chrono_literals;

// Four ranks as threads: every rank sets its key, bumps a shared counter, then reads every other rank's key.
void exerciseStore(const std::vector<Store*>& stores) {
  const int world = static_cast<int>(stores.size());
  constexpr int kAdds = 50;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      Store& store = *stores[static_cast<std::size_t>(r)];
      for (int i = 0; i < kAdds; ++i) {
        store.add("counter", 1);
      }
      store.setString("key/" + std::to_string(r), "value " + std::to_string(r));
      std::vector<std::string> keys;
      for (int p = 0; p < world; ++p) {
        keys.push_back("key/" + std::to_string(p));
      }
      store.wait(keys, 10s);
      EXPECT_TRUE(store.check(keys));
      for (int p = 0; p < world; ++p) {
        EXPECT_EQ(store.getString("key/" + std::to_string(p), 1s), "value " + std::to_string(p));
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  EXPECT_EQ(stores[0]->add("counter", 0), world * kAdds);
  EXPECT_EQ(stores[0]->getString("counter", 1s), std::to_string(world * kAdds));
  EXPECT_FALSE(stores[0]->check({"key/0", "absent"}));
}

TEST(InMemoryStoreTest, SetGetAddWaitFromFourThreads) {
  InMemoryStore store;
  exerciseStore({&store, &store, &store, &store});
}

TEST(InMemoryStoreTest, GetBlocksUntilTheKeyIsSet) {
  InMemoryStore store;
  std::thread setter([&] {
    std::this_thread::sleep_for(50ms);
    store.setString("late", "here");
  });
  EXPECT_EQ(store.getString("late", 10s), "here");
  setter.join();
}

TEST(InMemoryStoreTest, TimeoutsNameTheMissingKeys) {
  InMemoryStore store;
  store.setString("a", "1");
  try {
    store.wait({"a", "b"}, 50ms);
    FAIL() << "wait should time out";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("keys b missing"), std::string::npos) << e.what();
  }
  EXPECT_THROW(store.get("never", 20ms), Error);
  EXPECT_EQ(store.tryWait({"a", "b", "c"}, 10ms), (std::vector<std::string>{"b", "c"}));
}

TEST(InMemoryStoreTest, RendezvousTimeoutNamesTheRanksThatNeverArrived) {
  InMemoryStore store;
  std::vector<std::string> messages(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      RendezvousOptions options;
      options.rank = r;
      options.worldSize = 3;
      options.timeout = 200ms;
      options.where = "the test store";
      try {
        rendezvous(store, options);
      } catch (const Error& e) {
        messages[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  for (const std::string& message : messages) {
    EXPECT_EQ(message, "rendezvous at the test store timed out after 0.2 s: rank 2 of 3 never arrived");
  }
  EXPECT_EQ(store.add("rendezvous/joined", 0), 2);
}

TEST(InMemoryStoreTest, RendezvousCompletesWhenAllRanksArrive) {
  InMemoryStore store;
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] { EXPECT_NO_THROW(rendezvous(store, {r, 4, 10s, "the test store"})); });
  }
  for (std::thread& t : threads) {
    t.join();
  }
}

}  // namespace
}  // namespace strata
