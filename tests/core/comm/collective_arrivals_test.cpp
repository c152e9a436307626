#include "strata/comm/collective_arrivals.h"

#include <memory>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "strata/comm/in_memory_store.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

constexpr auto kPeriod = std::chrono::milliseconds(100);

TEST(CollectiveArrivalsTest, TheRanksBehindACollectiveAreNamedWithTheirLastOne) {
  InMemoryStore store;
  store.setString(collectiveArrivalKey("g/", 0), "5");
  store.setString(collectiveArrivalKey("g/", 2), "4");
  EXPECT_EQ(describeMissingRanks(store, "g/", 3, 5, std::chrono::seconds(1)),
            "ranks 1, 2 of 3 did not join (rank 1 joined none, rank 2 last joined #4)");
}

TEST(CollectiveArrivalsTest, ARankWhoseHeartbeatStoppedIsNamedSilent) {
  auto store = std::make_shared<InMemoryStore>();
  {
    Heartbeat stopped(store, "g/", 1, kPeriod);  // beats, then stops with its process
    std::this_thread::sleep_for(kPeriod * 2);
  }
  Heartbeat alive0(store, "g/", 0, kPeriod);
  Heartbeat alive2(store, "g/", 2, kPeriod);
  std::this_thread::sleep_for(kPeriod);
  EXPECT_THAT(describeSilentRanks(*store, "g/", 3, kPeriod), HasSubstr("rank 1 of 3 is silent (no heartbeat"));
}

// Rank 0 waits in the previous collective on the stopped rank 2: both are behind, and the heartbeats tell them apart.
TEST(CollectiveArrivalsTest, OfSeveralRanksBehindTheSilentOneIsNamed) {
  auto store = std::make_shared<InMemoryStore>();
  store->setString(collectiveArrivalKey("g/", 0), "25");
  store->setString(collectiveArrivalKey("g/", 1), "26");
  store->setString(collectiveArrivalKey("g/", 2), "25");
  {
    Heartbeat stopped(store, "g/", 2, kPeriod);
    std::this_thread::sleep_for(kPeriod * 2);
  }
  Heartbeat alive0(store, "g/", 0, kPeriod);
  Heartbeat alive1(store, "g/", 1, kPeriod);
  std::this_thread::sleep_for(kPeriod);
  const std::string message = describeMissingRanks(*store, "g/", 3, 26, std::chrono::seconds(1), kPeriod);
  EXPECT_THAT(message, HasSubstr("ranks 0, 2 of 3 did not join (rank 0 last joined #25, rank 2 last joined #25); "));
  EXPECT_THAT(message, HasSubstr("rank 2 of 3 is silent (no heartbeat"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("rank 0 of 3 is silent")));
}

TEST(CollectiveArrivalsTest, EveryRankBeatingBlamesTheTransport) {
  auto store = std::make_shared<InMemoryStore>();
  Heartbeat alive0(store, "g/", 0, kPeriod);
  Heartbeat alive1(store, "g/", 1, kPeriod);
  std::this_thread::sleep_for(kPeriod);
  EXPECT_THAT(describeSilentRanks(*store, "g/", 2, kPeriod), HasSubstr("every rank's heartbeat is alive"));
}

// A group without heartbeats (NCCL keeps none) must not have every rank called silent.
TEST(CollectiveArrivalsTest, NoHeartbeatsAtAllIsSaidSo) {
  InMemoryStore store;
  EXPECT_EQ(describeSilentRanks(store, "g/", 2, kPeriod), "no rank keeps a heartbeat under 'g/'");
}

}  // namespace
}  // namespace strata
