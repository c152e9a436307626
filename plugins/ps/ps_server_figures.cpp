#include "ps_server_figures.h"

#include <sys/resource.h>

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "strata/allocator.h"
#include "strata/memory_category.h"
#include "strata/sdk/roles.h"

namespace strata::ps {
namespace {

// The process's peak resident set (ru_maxrss is in KiB on Linux).
std::int64_t residentPeakBytes() {
  rusage usage{};
  return ::getrusage(RUSAGE_SELF, &usage) == 0 ? static_cast<std::int64_t>(usage.ru_maxrss) * 1024 : 0;
}

}  // namespace

ServerFigures::ServerFigures(Store& store, std::string role, int index, std::int64_t restarts)
    : store_(store), role_(std::move(role)), index_(index), restarts_(restarts) {
  const std::string key = roleFiguresKey(role_, index_);
  if (restarts_ == 0 || !store_.check({key})) {
    return;
  }
  try {
    const nlohmann::json before = nlohmann::json::parse(store_.getString(key, std::chrono::seconds(10)));
    earlier_.totalPeak = before.value("peak_memory_bytes", std::int64_t{0});
    const nlohmann::json breakdown = before.value("memory_breakdown", nlohmann::json::object());
    for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
      earlier_.peak[c] =
          breakdown.value(std::string(memoryCategoryName(static_cast<MemoryCategory>(c))), std::int64_t{0});
    }
    earlierResident_ = before.value("resident_peak_bytes", std::int64_t{0});
  } catch (const std::exception& e) {
    // The figures are a report, not the training: a damaged record loses the earlier peaks, nothing else.
    fmt::print("ps-server {}: cannot read the figures of its earlier process ({}); reporting this process's only\n",
               index_, e.what());
  }
}

void ServerFigures::setKeyRanges(std::size_t ranges, std::int64_t bytes) {
  keyRanges_ = ranges;
  keyRangeBytes_ = bytes;
}

nlohmann::json ServerFigures::json() const {
  return figures(allocatorFor(Device::cpu()).stats().snapshot(), residentPeakBytes());
}

nlohmann::json ServerFigures::figures(const MemorySnapshot& now, std::int64_t resident) const {
  nlohmann::json breakdown = nlohmann::json::object();
  for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
    breakdown[std::string(memoryCategoryName(static_cast<MemoryCategory>(c)))] =
        std::max(now.peak[c], earlier_.peak[c]);
  }
  return {{"role", role_},
          {"index", index_},
          {"peak_memory_bytes", std::max(now.totalPeak, earlier_.totalPeak)},
          {"memory_breakdown", breakdown},
          {"resident_peak_bytes", std::max(resident, earlierResident_)},
          {"key_ranges", keyRanges_},
          {"key_range_bytes", keyRangeBytes_},
          {"restarts", restarts_}};
}

std::int64_t ServerFigures::residentStep(std::int64_t published) {
  return std::max(std::int64_t{1} << 20, published / 32);
}

void ServerFigures::publishIfChanged() {
  const MemorySnapshot now = allocatorFor(Device::cpu()).stats().snapshot();
  const std::int64_t resident = residentPeakBytes();
  // The resident set creeps by a page here and there (and by megabytes under ASan's allocator): a rise under
  // residentStep() waits for the next publish, so the figure is at most that much behind.
  const bool residentRose = publishedResident_ < 0 || resident >= publishedResident_ + residentStep(publishedResident_);
  if (now.totalPeak == published_.totalPeak && now.peak == published_.peak && !residentRose &&
      keyRangeBytes_ == publishedKeyBytes_) {
    return;
  }
  store_.setString(roleFiguresKey(role_, index_), figures(now, resident).dump());
  published_ = now;
  publishedResident_ = resident;
  publishedKeyBytes_ = keyRangeBytes_;
}

}  // namespace strata::ps
