#pragma once

// What the lossy compressors share: per-bucket state tensors (MemoryCategory::Compression), the gradient dtypes
// they compute in, and the step count that seeds their randomness.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "strata/error.h"
#include "strata/sdk/compression.h"

namespace strata::compression {

// Runs f.template operator()<T>() with T float or double: the gradient dtypes the host-side compressors take.
template <typename F>
void dispatchGradient(const std::string& compressor, DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32:
      f.template operator()<float>();
      return;
    case DType::Float64:
      f.template operator()<double>();
      return;
    default:
      fail("compressor '{}': gradients of dtype {} are not supported (float32 or float64)", compressor,
           dtypeName(dtype));
  }
}

// Named state tensors, one set per bucket, checkpointed as "<name>/<bucket>".
class BucketState {
 public:
  // Zeroed, under MemoryCategory::Compression.
  Tensor& add(const std::string& name, int bucket, DType dtype, std::int64_t elements);
  Tensor& get(const std::string& name, int bucket);
  std::vector<std::pair<std::string, Tensor>> all() const { return tensors_; }

 private:
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

// The host-side compressors read and write gradients in host memory; refuses device buckets naming the compressor.
void requireHostBuckets(const std::string& compressor, const std::vector<GradientBucket>& buckets);

// A bucket's step counter (an Int64 state tensor): returns the count before this call and adds one.
std::int64_t nextStep(Tensor& counter);

// A seed that is the same on every rank for (seed, bucket, step) and differs between them.
std::uint64_t mixSeed(std::uint64_t seed, int bucket, std::int64_t step);

// What the host-side compressors share: their specification, their state, host buckets only, and the dispatch
// of a bucket to Derived::reduce<T> for its dtype. Derived provides prepareBucket(bucket) and reduce<T>(bucket,
// group, timeout), and befriends this class.
template <typename Derived>
class HostCompressor : public GradientCompressor {
 public:
  explicit HostCompressor(std::string text) : text_(std::move(text)) {}

  std::string describe() const final { return text_; }

  void prepare(const std::vector<GradientBucket>& buckets) final {
    requireHostBuckets(text_, buckets);
    for (const GradientBucket& bucket : buckets) {
      static_cast<Derived*>(this)->prepareBucket(bucket);
    }
  }

  CompressionTraffic allReduce(GradientBucket& bucket, ProcessGroup& group, std::chrono::milliseconds timeout) final {
    CompressionTraffic traffic;
    dispatchGradient(text_, bucket.gradient.dtype(), [&]<typename T>() {
      traffic = static_cast<Derived*>(this)->template reduce<T>(bucket, group, timeout);
    });
    return traffic;
  }

  std::vector<std::pair<std::string, Tensor>> state() final { return state_.all(); }

 protected:
  std::string text_;
  BucketState state_;
};

}  // namespace strata::compression
