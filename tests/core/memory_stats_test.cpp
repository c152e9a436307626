// MemoryStats: peaks, what the total peak is made of, and snapshots that are one moment of the accounting while
// other threads allocate and free (Note [Consistent snapshots] in core/sdk/include/strata/memory_stats.h).
#include "strata/memory_stats.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cpu_allocator.h"

namespace strata {
// A named namespace: the unity build compiles test files together, and their helpers must not meet.
namespace memory_stats_test {

TEST(MemoryStatsTest, PeakTracksTheMaximum) {
  MemoryStats stats;
  stats.onAllocate(MemoryCategory::Activations, 100);
  stats.onAllocate(MemoryCategory::Activations, 50);
  stats.onFree(MemoryCategory::Activations, 100);
  stats.onAllocate(MemoryCategory::Workspace, 10);
  const MemorySnapshot s = stats.snapshot();
  EXPECT_EQ(s.current[static_cast<std::size_t>(MemoryCategory::Activations)], 50);
  EXPECT_EQ(s.peak[static_cast<std::size_t>(MemoryCategory::Activations)], 150);
  EXPECT_EQ(s.totalCurrent, 60);
  EXPECT_EQ(s.totalPeak, 150);
  stats.resetPeaks();
  EXPECT_EQ(stats.snapshot().totalPeak, 60);
}

TEST(MemoryStatsTest, PeakRecordsWhatTheTotalPeakIsMadeOf) {
  MemoryStats stats;
  const auto at = [](const MemorySnapshot& s, MemoryCategory c) { return s.atTotalPeak[static_cast<std::size_t>(c)]; };
  stats.onAllocate(MemoryCategory::Activations, 100);
  stats.onAllocate(MemoryCategory::Communication, 40);  // total peak 140: 100 + 40
  stats.onFree(MemoryCategory::Communication, 40);
  stats.onAllocate(MemoryCategory::Gradients, 30);  // 130: no new total peak, though the gradients' peak is here
  MemorySnapshot s = stats.snapshot();
  EXPECT_EQ(s.totalPeak, 140);
  EXPECT_EQ(at(s, MemoryCategory::Activations), 100);
  EXPECT_EQ(at(s, MemoryCategory::Communication), 40);
  EXPECT_EQ(at(s, MemoryCategory::Gradients), 0);
  stats.resetPeaks();  // a new window starts from what is alive now
  s = stats.snapshot();
  EXPECT_EQ(at(s, MemoryCategory::Communication), 0);
  EXPECT_EQ(at(s, MemoryCategory::Gradients), 30);
  stats.onAllocate(MemoryCategory::Parameters, 20);
  EXPECT_EQ(at(stats.snapshot(), MemoryCategory::Parameters), 20);
}

// What a snapshot must satisfy whenever it is taken; empty when it does.
std::string inconsistency(const MemorySnapshot& s) {
  const std::int64_t categories = std::accumulate(s.current.begin(), s.current.end(), std::int64_t{0});
  if (categories != s.totalCurrent) {
    return "categories " + std::to_string(categories) + " != total " + std::to_string(s.totalCurrent);
  }
  const std::int64_t atPeak = std::accumulate(s.atTotalPeak.begin(), s.atTotalPeak.end(), std::int64_t{0});
  if (atPeak != s.totalPeak) {
    return "categories at the peak " + std::to_string(atPeak) + " != total peak " + std::to_string(s.totalPeak);
  }
  if (s.totalPeak < s.totalCurrent) {
    return "total peak " + std::to_string(s.totalPeak) + " below the total " + std::to_string(s.totalCurrent);
  }
  for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
    if (s.peak[c] < s.current[c] || s.current[c] < 0) {
      return "category " + std::to_string(c) + ": current " + std::to_string(s.current[c]) + ", peak " +
             std::to_string(s.peak[c]);
    }
  }
  if (s.reserved < s.totalCurrent) {
    return "reserved " + std::to_string(s.reserved) + " below the total " + std::to_string(s.totalCurrent);
  }
  return {};
}

// Threads allocate and free blocks of every category through one allocator while another thread takes snapshots
// (the resource sampler's pattern); every snapshot must add up. Lock-free counters read one by one failed this
// within a few thousand snapshots on 2 cores.
TEST(MemoryStatsTest, SnapshotsAddUpWhileOtherThreadsAllocate) {
  CpuAllocator allocator;
  constexpr int kWriters = 4;
  constexpr int kRoundsPerWriter = 60000;
  std::atomic<int> writersLeft{kWriters};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      std::mt19937 random(static_cast<unsigned>(w));
      std::vector<std::pair<void*, std::pair<std::size_t, MemoryCategory>>> held;
      for (int round = 0; round < kRoundsPerWriter; ++round) {
        if (held.size() < 8 && (held.empty() || random() % 2 == 0)) {
          const auto category = static_cast<MemoryCategory>(random() % kMemoryCategoryCount);
          const std::size_t bytes = 64 * (1 + random() % 32);
          held.push_back({allocator.allocate(bytes, category), {bytes, category}});
        } else {
          const std::size_t i = random() % held.size();
          allocator.deallocate(held[i].first, held[i].second.first, held[i].second.second);
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
        }
        if (round % 5000 == 0 && w == 0) {
          allocator.stats().resetPeaks();  // a new peak window, as the trainer opens one each epoch
        }
      }
      for (auto& [ptr, what] : held) {
        allocator.deallocate(ptr, what.first, what.second);
      }
      writersLeft.fetch_sub(1);
    });
  }
  std::int64_t snapshots = 0;
  std::string firstProblem;
  std::int64_t problems = 0;
  while (writersLeft.load() > 0) {
    const MemorySnapshot s = allocator.stats().snapshot();
    ++snapshots;
    if (std::string problem = inconsistency(s); !problem.empty()) {
      if (problems++ == 0) {
        firstProblem = problem;
      }
    }
  }
  for (std::thread& t : writers) {
    t.join();
  }
  EXPECT_EQ(problems, 0) << problems << " of " << snapshots
                         << " snapshots mixed two moments; the first: " << firstProblem;
  EXPECT_GT(snapshots, 0);
  const MemorySnapshot end = allocator.stats().snapshot();
  EXPECT_EQ(end.totalCurrent, 0);
  EXPECT_EQ(inconsistency(end), "");
}

}  // namespace memory_stats_test
}  // namespace strata
