#include "strata/comm/async_work.h"

#include "strata/comm/communication_in_flight.h"
#include "strata/error.h"

namespace strata {

AsyncWork::AsyncWork(std::string description, DescribePending describePending)
    : description_(std::move(description)), describePending_(std::move(describePending)) {
  beginCommunication();
}

AsyncWork::~AsyncWork() {
  if (!completed_) {  // abandoned (its group shut down): no longer in flight
    endCommunication();
  }
}

void AsyncWork::wait(std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  bool done = false;
  std::optional<std::string> error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done = done_.wait_for(lock, timeout, [this] { return completed_; });
    waitedSeconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    error = error_;
  }
  if (!done) {
    // describePending_ may query the store: call it without holding mutex_.
    const std::string pending = describePending_ ? describePending_() : std::string();
    fail("{} did not complete within the wait timeout of {:g} s{}{}", description_,
         static_cast<double>(timeout.count()) / 1000.0, pending.empty() ? "" : ": ", pending);
  }
  if (error) {
    throw Error(*error);
  }
}

bool AsyncWork::isCompleted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

double AsyncWork::waitedSeconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return waitedSeconds_;
}

double AsyncWork::runSeconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return runSeconds_;
}

void AsyncWork::markCompleted(double runSeconds) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!completed_) {
      endCommunication();
    }
    completed_ = true;
    runSeconds_ = runSeconds;
  }
  done_.notify_all();
}

void AsyncWork::markFailed(std::string message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!completed_) {
      endCommunication();
    }
    completed_ = true;
    error_ = std::move(message);
  }
  done_.notify_all();
}

}  // namespace strata
