#include "compressor_state.h"

#include <fmt/format.h>

namespace strata::compression {

Tensor& BucketState::add(const std::string& name, int bucket, DType dtype, std::int64_t elements) {
  tensors_.emplace_back(fmt::format("{}/{}", name, bucket),
                        Tensor::zeros(dtype, {elements}, MemoryCategory::Compression));
  return tensors_.back().second;
}

Tensor& BucketState::get(const std::string& name, int bucket) {
  const std::string key = fmt::format("{}/{}", name, bucket);
  for (auto& [k, tensor] : tensors_) {
    if (k == key) {
      return tensor;
    }
  }
  fail("compressor state '{}' was never prepared (a bucket the strategy did not pass to prepare)", key);
}

void requireHostBuckets(const std::string& compressor, const std::vector<GradientBucket>& buckets) {
  for (const GradientBucket& bucket : buckets) {
    if (bucket.gradient.device().type != DeviceType::CPU) {
      fail(
          "compressor '{}' computes on the host and bucket {} lives on {}: on a GPU only fp16 and bf16 compress "
          "for now",
          compressor, bucket.index, bucket.gradient.device().toString());
    }
  }
}

std::int64_t nextStep(Tensor& counter) {
  std::int64_t& count = *counter.data<std::int64_t>();
  return count++;
}

std::uint64_t mixSeed(std::uint64_t seed, int bucket, std::int64_t step) {
  // splitmix64 over the three: neighbouring inputs give unrelated streams.
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(bucket) * 0xBF58476D1CE4E5B9ULL +
                    static_cast<std::uint64_t>(step) * 0x94D049BB133111EBULL;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  x ^= x >> 31;
  return x;
}

}  // namespace strata::compression
