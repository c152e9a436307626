#include "strata/comm/collective_arrivals.h"

#include <algorithm>
#include <exception>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "strata/thread_names.h"

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
                                 std::chrono::milliseconds timeout, std::chrono::milliseconds heartbeatPeriod) {
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
      return heartbeatPeriod.count() > 0 ? fmt::format("all {} ranks joined; {}", size,
                                                       describeSilentRanks(store, prefix, size, heartbeatPeriod))
                                         : fmt::format("all {} ranks joined", size);
    }
    std::string message = fmt::format("{} {} of {} did not join ({})", missing.size() == 1 ? "rank" : "ranks",
                                      fmt::join(missing, ", "), size, fmt::join(last, ", "));
    // Several ranks behind: most are waiting on one of them (a rank blocked in collective #n before launching
    // #n+1), and the heartbeats say which one is stopped, hung or cut off.
    if (missing.size() > 1 && heartbeatPeriod.count() > 0)
      message += "; " + describeSilentRanks(store, prefix, size, heartbeatPeriod);
    return message;
  } catch (const std::exception& e) {
    return fmt::format("the ranks that did not join are unknown (store query failed: {})", e.what());
  }
}

namespace {

std::string heartbeatKey(const std::string& prefix, int rank) {
  return prefix + fmt::format("heartbeat/rank/{}", rank);
}

}  // namespace

Heartbeat::Heartbeat(std::shared_ptr<Store> store, std::string prefix, int rank, std::chrono::milliseconds period)
    : store_(std::move(store)), key_(heartbeatKey(prefix, rank)), period_(period) {
  thread_ = std::thread([this] {
    nameThisThread("strata-heartbt");
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      lock.unlock();
      try {
        store_->add(key_, 1);
      } catch (const std::exception&) {
        // The store is gone (rank 0 exited): the job is ending, and the collectives will say why.
      }
      lock.lock();
      stop_.wait_for(lock, period_, [this] { return stopping_; });
    }
  });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_.notify_all();
  thread_.join();
}

std::chrono::milliseconds heartbeatPeriodFor(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 20, std::chrono::milliseconds(100), std::chrono::milliseconds(1000));
}

std::string describeSilentRanks(Store& store, const std::string& prefix, int size,
                                std::chrono::milliseconds heartbeatPeriod) {
  try {
    const auto counts = [&] {
      std::vector<std::int64_t> beats;
      for (int r = 0; r < size; ++r) {
        const std::string key = heartbeatKey(prefix, r);
        beats.push_back(store.check({key}) ? store.add(key, 0) : 0);
      }
      return beats;
    };
    const std::vector<std::int64_t> before = counts();
    if (std::all_of(before.begin(), before.end(), [](std::int64_t beats) { return beats == 0; })) {
      return "no rank keeps a heartbeat under '" + prefix + "'";
    }
    const auto window = heartbeatPeriod * 3;
    std::this_thread::sleep_for(window);
    const std::vector<std::int64_t> after = counts();
    std::vector<int> silent;
    for (int r = 0; r < size; ++r) {
      if (after[static_cast<std::size_t>(r)] == before[static_cast<std::size_t>(r)]) {
        silent.push_back(r);
      }
    }
    if (silent.empty()) {
      return "every rank's heartbeat is alive (the transport, not a rank, is stuck)";
    }
    return fmt::format("{} {} of {} {} silent (no heartbeat for {:g} s: stopped, hung or cut off)",
                       silent.size() == 1 ? "rank" : "ranks", fmt::join(silent, ", "), size,
                       silent.size() == 1 ? "is" : "are", static_cast<double>(window.count()) / 1000.0);
  } catch (const std::exception& e) {
    return fmt::format("the silent ranks are unknown (store query failed: {})", e.what());
  }
}

}  // namespace strata
