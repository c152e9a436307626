#pragma once

// The arrival records that process groups (GlooProcessGroup, the CUDA backend's NcclProcessGroup) keep in the
// store: each rank writes the sequence number of the last collective it joined under its arrival key, so a
// collective that fails or times out can say which ranks never arrived.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "strata/comm/store.h"

namespace strata {

// The key under which `rank` records its last joined collective, below the group's key prefix.
std::string collectiveArrivalKey(const std::string& prefix, int rank);

// "rank 1 of 2 did not join (rank 1 last joined #16)", from the arrival records of the ranks that have not joined
// collective `seq`; never throws. When every rank joined and the group keeps heartbeats (`heartbeatPeriod` > 0),
// it names the ranks whose heartbeat has stopped instead (describeSilentRanks).
std::string describeMissingRanks(Store& store, const std::string& prefix, int size, std::int64_t seq,
                                 std::chrono::milliseconds timeout,
                                 std::chrono::milliseconds heartbeatPeriod = std::chrono::milliseconds(0));

// Note [Heartbeats]: a rank that joined a collective and then went silent (SIGSTOP, a hung driver call, a host cut
// off) leaves no trace in the arrival records: every rank joined, and the collective still never ends. So each rank
// of a group counts a heartbeat in the store every period from a thread of its own, which keeps beating while the
// rank waits in a collective and stops with the process. On a failure, the ranks whose count does not move over
// three periods are the silent ones. Counts, not timestamps: no clocks need to agree across hosts.
class Heartbeat {
 public:
  Heartbeat(std::shared_ptr<Store> store, std::string prefix, int rank, std::chrono::milliseconds period);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  std::shared_ptr<Store> store_;
  std::string key_;
  std::chrono::milliseconds period_;
  std::mutex mutex_;
  std::condition_variable stop_;
  bool stopping_ = false;
  std::thread thread_;
};

// The heartbeat period for a group whose collectives time out after `timeout`: a twentieth of it, within
// [100 ms, 1 s], so the silent ranks are known well within the timeout.
std::chrono::milliseconds heartbeatPeriodFor(std::chrono::milliseconds timeout);

// "rank 2 of 4 is silent (no heartbeat for 0.75 s: stopped, hung or cut off)", or that every rank is alive; takes
// three heartbeat periods; never throws.
std::string describeSilentRanks(Store& store, const std::string& prefix, int size,
                                std::chrono::milliseconds heartbeatPeriod);

// "allReduce #16 (98.3 MB) at step 7": how errors and the watchdog name a collective (bytes 0: no size).
std::string describeCollective(const std::string& name, std::int64_t seq, std::size_t bytes, std::int64_t step);

}  // namespace strata
