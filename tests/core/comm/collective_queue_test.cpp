// CollectiveQueue (core/include/strata/comm/collective_queue.h): the thread Gloo's and the staging group's
// collectives run on, in issue order; the first failure makes the group unusable; stop() fails what is queued.
#include "strata/comm/collective_queue.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "strata/error.h"

namespace strata {
namespace {

CollectiveQueue::Entry entry(const std::string& description, std::function<void()> run) {
  return {std::make_shared<AsyncWork>(description), nullptr, std::move(run)};
}

TEST(CollectiveQueueTest, RunsInIssueOrderNumberedFromOneAtTheStepSet) {
  std::vector<std::string> logged;
  CollectiveQueue queue([&](const AsyncWork&, const std::string& message) { logged.push_back(message); });
  std::vector<std::int64_t> order;
  std::vector<WorkHandle> works;
  queue.setStep(7);
  for (int i = 0; i < 5; ++i) {
    works.push_back(queue.push("allReduce", [&](std::int64_t seq, std::int64_t step) {
      EXPECT_EQ(step, 7);
      return entry(fmt::format("#{}", seq), [&order, seq] { order.push_back(seq); });
    }));
  }
  for (const WorkHandle& work : works) {
    work->wait(std::chrono::seconds(5));
  }
  EXPECT_EQ(order, (std::vector<std::int64_t>{1, 2, 3, 4, 5}));
  EXPECT_TRUE(logged.empty());
}

TEST(CollectiveQueueTest, AfterAFailureLaterCollectivesFailWithTheFirstError) {
  std::vector<std::string> logged;
  CollectiveQueue queue([&](const AsyncWork& work, const std::string& message) {
    logged.push_back(fmt::format("{}: {}", work.description(), message));
  });
  const WorkHandle failing = queue.push("broadcast", [](std::int64_t, std::int64_t) {
    return entry("broadcast #1", [] { throw Error("rank 1 of 2 did not join"); });
  });
  bool ran = false;
  const WorkHandle later =
      queue.push("barrier", [&](std::int64_t, std::int64_t) { return entry("barrier #2", [&] { ran = true; }); });
  EXPECT_THROW(failing->wait(std::chrono::seconds(5)), Error);
  try {
    later->wait(std::chrono::seconds(5));
    FAIL() << "the group is unusable after a failure";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unusable after an earlier failure: rank 1 of 2 did not join"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(ran);
  ASSERT_EQ(logged.size(), 1U);
  EXPECT_EQ(logged[0], "broadcast #1: rank 1 of 2 did not join");
}

TEST(CollectiveQueueTest, StopFailsWhatIsQueuedAndRefusesMore) {
  CollectiveQueue queue([](const AsyncWork&, const std::string&) {});
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> started{false};
  const WorkHandle running = queue.push("allGather", [&](std::int64_t, std::int64_t) {
    return entry("allGather #1", [&, released] {
      started = true;
      released.wait();
    });
  });
  const WorkHandle queued =
      queue.push("allReduce", [](std::int64_t, std::int64_t) { return entry("allReduce #2", [] {}); });
  while (!started) {
    std::this_thread::yield();
  }
  std::thread stopper([&] { queue.stop(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  release.set_value();  // the running collective finishes; the queued one is failed, not run
  stopper.join();
  EXPECT_NO_THROW(running->wait(std::chrono::seconds(5)));
  EXPECT_THROW(queued->wait(std::chrono::seconds(5)), Error);
  EXPECT_THROW(queue.push("barrier", [](std::int64_t, std::int64_t) { return entry("barrier #3", [] {}); }), Error);
}

}  // namespace
}  // namespace strata
