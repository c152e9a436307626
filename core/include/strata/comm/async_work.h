#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "strata/comm/work.h"

namespace strata {

// A Work completed by another thread (a process group's worker). wait() rethrows the failure message as Error; a
// wait that times out throws Error naming the operation plus what `describePending` reports (the ranks that have
// not joined), and leaves the work pending so that a later wait() may still succeed. From construction to completion
// it counts as a collective in flight (Note [Giving way to communication]).
class AsyncWork final : public Work {
 public:
  using DescribePending = std::function<std::string()>;

  explicit AsyncWork(std::string description, DescribePending describePending = {});
  ~AsyncWork() override;
  AsyncWork(const AsyncWork&) = delete;
  AsyncWork& operator=(const AsyncWork&) = delete;

  void wait(std::chrono::milliseconds timeout) override;
  bool isCompleted() const override;
  double waitedSeconds() const override;
  double runSeconds() const override;

  void markCompleted(double runSeconds = 0.0);
  void markFailed(std::string message);
  const std::string& description() const { return description_; }

 private:
  const std::string description_;
  const DescribePending describePending_;
  mutable std::mutex mutex_;
  std::condition_variable done_;
  bool completed_ = false;
  std::optional<std::string> error_;
  double waitedSeconds_ = 0.0;
  double runSeconds_ = 0.0;
};

}  // namespace strata
