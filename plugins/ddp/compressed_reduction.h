#pragma once

// DDP's buckets through a gradient compressor (--strategy-opt compress=SPEC), on a thread of their own.
//
// Note [Compressed buckets in order]: a compressor's reduction is several collectives and host computation, and it
// blocks, so it runs on one communication thread that takes ready buckets in the order backward finalises them:
// the same order on every rank (Note [Bucket launch order]), which the collectives inside need. Backward goes on
// meanwhile, as with the plain all-reduces.

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "strata/sdk/compression.h"

namespace strata::plugins {

class CompressedReduction {
 public:
  CompressedReduction(std::unique_ptr<GradientCompressor> compressor, ProcessGroup& group,
                      std::chrono::milliseconds timeout);
  ~CompressedReduction();
  CompressedReduction(const CompressedReduction&) = delete;
  CompressedReduction& operator=(const CompressedReduction&) = delete;

  GradientCompressor& compressor() { return *compressor_; }
  // Queues the bucket (kept alive by the caller until wait() returns).
  void start(GradientBucket& bucket);
  // Waits for every queued bucket; rethrows the first failure. Returns the traffic of the buckets since the last wait.
  CompressionTraffic wait();

 private:
  void run();

  std::unique_ptr<GradientCompressor> compressor_;
  ProcessGroup& group_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<GradientBucket*> queue_;
  int running_ = 0;
  bool stopping_ = false;
  std::exception_ptr failure_;
  CompressionTraffic traffic_;
  std::thread thread_;
};

}  // namespace strata::plugins
