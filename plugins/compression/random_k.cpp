// randomk:ratio=R[,seed=S]: every rank sends the same randomly chosen R of the bucket's accumulated gradient
// elements. The choice comes from a generator seeded by (seed, bucket, step), equal on every rank, so only the values
// travel and a plain all-reduce sums them. Error feedback as in Stich et al. (2018), "Sparsified SGD with memory":
// the unsent elements stay in a residual added to the next step's gradient.
#include <algorithm>
#include <cmath>
#include <random>

#include "compressor_state.h"
#include "compressors.h"

namespace strata::compression {
namespace {

class RandomKCompressor final : public HostCompressor<RandomKCompressor> {
 public:
  explicit RandomKCompressor(CompressorSpec& spec)
      : HostCompressor(spec.text()),
        ratio_(spec.number("ratio", 0.01, 0.0, 1.0, /*lowOpen=*/true)),
        seed_(static_cast<std::uint64_t>(spec.integer("seed", 0, 0, 1LL << 62))) {}

  void prepareBucket(const GradientBucket& bucket) {
    state_.add("residual", bucket.index, bucket.gradient.dtype(), bucket.gradient.numel());
    state_.add("steps", bucket.index, DType::Int64, 1);
  }

 private:
  friend class HostCompressor<RandomKCompressor>;

  template <typename T>
  CompressionTraffic reduce(GradientBucket& bucket, ProcessGroup& group, std::chrono::milliseconds timeout) {
    const std::int64_t n = bucket.gradient.numel();
    T* g = bucket.gradient.data<T>();
    T* residual = state_.get("residual", bucket.index).data<T>();
    const std::int64_t step = nextStep(state_.get("steps", bucket.index));
    const auto k = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(ratio_ * n)), 1, n);
    const std::vector<std::int64_t> chosen = sample(n, k, mixSeed(seed_, bucket.index, step));

    Tensor values = Tensor::empty(bucket.gradient.dtype(), {k}, MemoryCategory::Communication);
    T* sent = values.data<T>();
    for (std::int64_t i = 0; i < n; ++i) {
      residual[i] += g[i];
    }
    for (std::int64_t j = 0; j < k; ++j) {
      sent[j] = residual[chosen[j]];
      residual[chosen[j]] = 0;
    }
    group.allReduce(values, ReduceOp::Average)->wait(timeout);
    std::fill(g, g + n, T(0));
    for (std::int64_t j = 0; j < k; ++j) {
      g[chosen[j]] = sent[j];
    }
    return {static_cast<std::int64_t>(values.bytes()), static_cast<std::int64_t>(bucket.gradient.bytes())};
  }

  // k distinct indices of [0, n), ascending: Knuth's selection sampling (Algorithm S), one draw per index.
  static std::vector<std::int64_t> sample(std::int64_t n, std::int64_t k, std::uint64_t seed) {
    std::vector<std::int64_t> chosen;
    chosen.reserve(static_cast<std::size_t>(k));
    std::mt19937_64 generator(seed);
    for (std::int64_t i = 0; i < n && static_cast<std::int64_t>(chosen.size()) < k; ++i) {
      const double u = static_cast<double>(generator() >> 11) * 0x1.0p-53;  // uniform in [0, 1), the same everywhere
      if (u * static_cast<double>(n - i) < static_cast<double>(k - static_cast<std::int64_t>(chosen.size()))) {
        chosen.push_back(i);
      }
    }
    return chosen;
  }

  double ratio_;
  std::uint64_t seed_;
};

}  // namespace

std::unique_ptr<GradientCompressor> makeRandomK(CompressorSpec& spec) {
  return std::make_unique<RandomKCompressor>(spec);
}

}  // namespace strata::compression
