// Note [Thread names]: named threads, and the CPU seconds counted per name from /proc/self/task.
#include "strata/thread_names.h"

#include <pthread.h>
#include <time.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "comm/thread_ranks.h"

namespace strata {
namespace {

double threadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

std::string nameOfThisThread() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

int threadsNamed(const std::string& name) {
  int count = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    count += std::getline(comm, line) && line == name ? 1 : 0;
  }
  return count;
}

TEST(ThreadNamesTest, CountsTheCpuSecondsOfTheThreadsOfOneNameOnly) {
  std::atomic<bool> spun{false};
  std::atomic<bool> release{false};
  double spunSeconds = 0;
  std::thread spinner([&] {
    nameThisThread("strata-test-spinner-with-a-long-name");  // Linux keeps 15 characters
    EXPECT_EQ(nameOfThisThread(), "strata-test-spi");
    volatile double sink = 0;
    while (threadCpuSeconds() < 0.3) {
      sink = sink + 1.0;
    }
    spunSeconds = threadCpuSeconds();
    spun = true;
    while (!release) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  while (!spun) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // /proc counts clock ticks (10 ms): the named thread's 0.3 s, give or take its ticks and the sleeps since.
  const double counted = cpuSecondsOfThreadsNamed("strata-test-spinner-with-a-long-name");
  EXPECT_GE(counted, spunSeconds - 0.03);
  EXPECT_LE(counted, spunSeconds + 0.1);
  EXPECT_GE(cpuSecondsOfThreadsNamed("strata-test"), counted);  // a prefix takes in every name it starts
  EXPECT_EQ(cpuSecondsOfThreadsNamed("strata-no-such-thread"), 0.0);
  release = true;
  spinner.join();
  EXPECT_EQ(cpuSecondsOfThreadsNamed("strata-test-spi"), 0.0);  // an ended thread is no longer counted
}

TEST(ThreadNamesTest, GlooGroupsNameTheirWorkerAndGloosEventLoopAsCommunicationThreads) {
  const std::string name(kCommunicationThread);
  const int before = threadsNamed(name);
  std::atomic<int> joined{0};
  std::atomic<int> during{0};
  testing::runGlooRanks(2, [&](GlooProcessGroup& pg) {
    pg.barrier()->wait(std::chrono::seconds(30));
    if (++joined == 2) {
      during = threadsNamed(name);
    }
    pg.barrier()->wait(std::chrono::seconds(30));
  });
  // Each rank's group: its worker and the event loop of its Gloo device (which took the creating thread's name).
  EXPECT_EQ(during - before, 4);
  EXPECT_EQ(threadsNamed(name), before);
}

}  // namespace
}  // namespace strata
