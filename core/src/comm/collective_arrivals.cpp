#include "strata/comm/collective_arrivals.h"

#include <exception>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace strata {

namespace {

std::string formatBytes(std::size_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024.0 * 1024.0) {
    return fmt::format("{:.1f} GB", b / (1024.0 * 1024.0 * 1024.0));
  }
  if (b >= 1024.0 * 1024.0) {
    return fmt::format("{:.1f} MB", b / (1024.0 * 1024.0));
  }
  if (b >= 1024.0) {
    return fmt::format("{:.1f} KB", b / 1024.0);
  }
  return fmt::format("{} B", bytes);
}

}  // namespace

std::string describeCollective(const std::string& name, std::int64_t seq, std::size_t bytes, std::int64_t step) {
  return bytes > 0 ? fmt::format("{} #{} ({}) at step {}", name, seq, formatBytes(bytes), step)
                   : fmt::format("{} #{} at step {}", name, seq, step);
}

std::string collectiveArrivalKey(const std::string& prefix, int rank) {
  return prefix + fmt::format("collective/rank/{}", rank);
}

std::string describeMissingRanks(Store& store, const std::string& prefix, int size, std::int64_t seq,
                                 std::chrono::milliseconds timeout) {
  try {
    std::vector<int> missing;
    std::vector<std::string> last;
    for (int r = 0; r < size; ++r) {
      const std::string k = collectiveArrivalKey(prefix, r);
      std::int64_t joined = 0;
      if (store.check({k})) {
        joined = std::stoll(store.getString(k, timeout));
      }
      if (joined < seq) {
        missing.push_back(r);
        last.push_back(joined > 0 ? fmt::format("rank {} last joined #{}", r, joined)
                                  : fmt::format("rank {} joined none", r));
      }
    }
    if (missing.empty()) {
      return fmt::format("all {} ranks joined", size);
    }
    return fmt::format("{} {} of {} did not join ({})", missing.size() == 1 ? "rank" : "ranks",
                       fmt::join(missing, ", "), size, fmt::join(last, ", "));
  } catch (const std::exception& e) {
    return fmt::format("the ranks that did not join are unknown (store query failed: {})", e.what());
  }
}

}  // namespace strata
