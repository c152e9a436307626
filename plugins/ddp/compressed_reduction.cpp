#include "compressed_reduction.h"

#include <pthread.h>

#include "strata/error.h"

namespace strata::plugins {

CompressedReduction::CompressedReduction(std::unique_ptr<GradientCompressor> compressor, ProcessGroup& group,
                                         std::chrono::milliseconds timeout)
    : compressor_(std::move(compressor)), group_(group), timeout_(timeout), thread_([this] { run(); }) {
  // Named as Strata's communication threads are, so summary.json's communication_cpu_s counts it.
  pthread_setname_np(thread_.native_handle(), "strata-comm");
}

CompressedReduction::~CompressedReduction() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void CompressedReduction::start(GradientBucket& bucket) {
  {
    const std::lock_guard lock(mutex_);
    queue_.push_back(&bucket);
  }
  changed_.notify_all();
}

CompressionTraffic CompressedReduction::wait() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
  if (failure_) {
    std::rethrow_exception(failure_);
  }
  const CompressionTraffic done = traffic_;
  traffic_ = {};
  return done;
}

void CompressedReduction::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) {
      return;  // the strategy is torn down (a failed step): buckets not started yet are dropped
    }
    GradientBucket* bucket = queue_.front();
    queue_.pop_front();
    if (failure_) {
      continue;  // after a failure the group is unusable: drop the rest, wait() reports the first
    }
    ++running_;
    lock.unlock();
    CompressionTraffic traffic;
    std::exception_ptr failure;
    try {
      traffic = compressor_->allReduce(*bucket, group_, timeout_);
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    --running_;
    failure_ = failure_ ? failure_ : failure;
    traffic_.sentBytes += traffic.sentBytes;
    traffic_.uncompressedBytes += traffic.uncompressedBytes;
    changed_.notify_all();
  }
}

}  // namespace strata::plugins
