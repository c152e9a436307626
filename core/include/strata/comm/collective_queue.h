#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "strata/comm/async_work.h"

namespace strata {

// The one thread on which a host-side process group (Gloo's, the staging group) runs its collectives, in the order
// they were issued (every rank issues the same order), and the bookkeeping those groups share: sequence numbers and
// the current step for the collectives' descriptions, shutdown (Note [shutdown]: queued collectives fail, the running
// one finishes), and a group unusable after its first failure (later collectives fail at once with that error).
class CollectiveQueue {
 public:
  // What a queued collective does on the thread. `prologue` runs untimed (Gloo's arrival record); `run` is timed
  // (the work's runSeconds) and throws to fail: its message becomes the work's error and the group's first failure.
  // Both are released before the work is marked done (Note [Buffers released before completion]).
  struct Entry {
    std::shared_ptr<AsyncWork> work;
    std::function<void()> prologue;
    std::function<void()> run;
  };
  // Logs a collective's failure (`message` is what its work reports).
  using LogFailure = std::function<void(const AsyncWork& work, const std::string& message)>;

  explicit CollectiveQueue(LogFailure logFailure);
  // Stops and joins (see stop()).
  ~CollectiveQueue();
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;

  // Fails the queued collectives and waits for the running one; later pushes throw. An owner whose collectives use
  // its members calls it first in its destructor.
  void stop();
  // Under the queue's lock, `make(seq, step)` builds collective number `seq` (from 1, in issue order) issued at `step`.
  WorkHandle push(const std::string& name, const std::function<Entry(std::int64_t seq, std::int64_t step)>& make);

  // The training step named in the collectives' descriptions.
  void setStep(std::int64_t step) { step_.store(step); }

 private:
  void loop();
  void execute(Entry& entry);

  const LogFailure logFailure_;
  std::atomic<std::int64_t> step_{0};
  std::int64_t nextSeq_ = 1;  // guarded by mutex_
  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<Entry> queue_;
  bool stopping_ = false;
  std::optional<std::string> brokenBy_;  // thread-only: the first failure
  std::thread thread_;
};

}  // namespace strata
