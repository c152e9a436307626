#pragma once

// What a parameter server reports of itself in the run's summary.json (Note [Role figures] in strata/sdk/roles.h,
// Note [PS server memory] in ps_counted_bytes.h): its peak memory by category from Strata's allocator, its peak
// resident set, and the key ranges it holds. A restarted server (Note [PS recovery]) keeps the peaks its earlier
// processes published: the figures are the server's over the whole job.

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "strata/comm/store.h"
#include "strata/memory_stats.h"

namespace strata::ps {

class ServerFigures {
 public:
  // Reads what an earlier process of the same server published (when `restarts` > 0).
  ServerFigures(Store& store, std::string role, int index, std::int64_t restarts);

  // The key ranges this server holds and their bytes (once an Init or a reloaded checkpoint gave them).
  void setKeyRanges(std::size_t ranges, std::int64_t bytes);
  // How far the peak resident set must rise above the published one to be published again by itself: 1 MiB or
  // 1/32 of it, whichever is more.
  static std::int64_t residentStep(std::int64_t published);

  // Publishes the figures when an allocator peak rose, the resident peak rose by residentStep() or the key ranges
  // changed since the last publish; otherwise costs an
  // allocator snapshot and a getrusage call. Called before every answer (Note [Role figures]).
  void publishIfChanged();
  // The figures as published.
  nlohmann::json json() const;

 private:
  nlohmann::json figures(const MemorySnapshot& now, std::int64_t resident) const;

  Store& store_;
  std::string role_;
  int index_;
  std::int64_t restarts_;
  std::size_t keyRanges_ = 0;
  std::int64_t keyRangeBytes_ = 0;
  MemorySnapshot earlier_;            // the peaks of this server's earlier processes
  std::int64_t earlierResident_ = 0;  // their peak resident set
  MemorySnapshot published_;
  std::int64_t publishedResident_ = -1;
  std::int64_t publishedKeyBytes_ = -1;
};

}  // namespace strata::ps
