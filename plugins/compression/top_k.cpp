// topk:ratio=R: each rank sends its R-largest-magnitude accumulated gradient elements as (index, value) pairs,
// gathered by all-gather (a sum of sparse vectors is not sparse), with error feedback: what was not sent stays in a
// residual and is added to the next step's gradient. Deep Gradient Compression's (Lin et al., 2018) refinements as
// options: momentum=M (momentum correction: the residual accumulates the velocity u = M u + g, and the sent
// elements' velocity is cleared, so run it with an optimizer without momentum), clip=C (local gradient clipping:
// each rank's gradient L2 norm clipped to C / sqrt(ranks) before accumulation) and warmup_steps=S (the density
// falls geometrically from 1 to R over the first S steps).
//
// Note [Indices in float slots]: the process group's collectives take floating tensors; an all-gather only moves
// bytes, so each index travels as the bits of one element (int32 in a float, int64 in a double).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "compressor_state.h"
#include "compressors.h"

namespace strata::compression {
namespace {

template <typename T>
using IndexBits = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;

class TopKCompressor final : public HostCompressor<TopKCompressor> {
 public:
  explicit TopKCompressor(CompressorSpec& spec)
      : HostCompressor(spec.text()),
        ratio_(spec.number("ratio", 0.01, 0.0, 1.0, /*lowOpen=*/true)),
        momentum_(spec.number("momentum", 0.0, 0.0, 0.999999)),
        clip_(spec.number("clip", 0.0, 0.0, 1e30)),
        warmupSteps_(spec.integer("warmup_steps", 0, 0, 1LL << 40)) {}

  void prepareBucket(const GradientBucket& bucket) {
    if (bucket.gradient.dtype() == DType::Float32 && bucket.gradient.numel() > (1LL << 31) - 1) {
      fail("compressor '{}': bucket {} holds {} elements, more than a float32 slot's index can name", text_,
           bucket.index, bucket.gradient.numel());
    }
    state_.add("residual", bucket.index, bucket.gradient.dtype(), bucket.gradient.numel());
    if (momentum_ > 0) {
      state_.add("velocity", bucket.index, bucket.gradient.dtype(), bucket.gradient.numel());
    }
    state_.add("steps", bucket.index, DType::Int64, 1);
  }

  // The fraction of elements sent at a step: R after the warm-up, R^((step + 1) / S) during it.
  double density(std::int64_t step) const {
    if (step >= warmupSteps_) {
      return ratio_;
    }
    return std::pow(ratio_, static_cast<double>(step + 1) / static_cast<double>(warmupSteps_));
  }

 private:
  friend class HostCompressor<TopKCompressor>;

  template <typename T>
  CompressionTraffic reduce(GradientBucket& bucket, ProcessGroup& group, std::chrono::milliseconds timeout) {
    const std::int64_t n = bucket.gradient.numel();
    const int ranks = group.size();
    T* g = bucket.gradient.data<T>();
    T* residual = state_.get("residual", bucket.index).data<T>();
    const std::int64_t step = nextStep(state_.get("steps", bucket.index));
    clipLocally(g, n, ranks);
    if (momentum_ > 0) {
      T* velocity = state_.get("velocity", bucket.index).data<T>();
      for (std::int64_t i = 0; i < n; ++i) {
        velocity[i] = static_cast<T>(momentum_) * velocity[i] + g[i];
        residual[i] += velocity[i];
      }
    } else {
      for (std::int64_t i = 0; i < n; ++i) {
        residual[i] += g[i];
      }
    }
    const auto k = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(density(step) * n)), 1, n);
    const std::vector<std::int64_t> chosen = largest(residual, n, k);

    // This rank's part: k values, then k indices (Note [Indices in float slots]).
    Tensor mine = Tensor::empty(bucket.gradient.dtype(), {2 * k}, MemoryCategory::Communication);
    Tensor all = Tensor::empty(bucket.gradient.dtype(), {2 * k * ranks}, MemoryCategory::Communication);
    T* values = mine.data<T>();
    for (std::int64_t j = 0; j < k; ++j) {
      values[j] = residual[chosen[j]];
      const auto index = static_cast<IndexBits<T>>(chosen[j]);
      std::memcpy(values + k + j, &index, sizeof(T));
    }
    group.allGather(mine, all)->wait(timeout);

    std::fill(g, g + n, T(0));
    const T* gathered = all.data<T>();
    for (int r = 0; r < ranks; ++r) {
      const T* part = gathered + 2 * k * r;
      for (std::int64_t j = 0; j < k; ++j) {
        IndexBits<T> index = 0;
        std::memcpy(&index, part + k + j, sizeof(T));
        if (index < 0 || index >= n) {
          fail("compressor '{}': rank {} sent index {} for bucket {} of {} elements", text_, r, index, bucket.index, n);
        }
        g[index] += part[j];
      }
    }
    const T scale = T(1) / static_cast<T>(ranks);
    for (std::int64_t i = 0; i < n; ++i) {
      g[i] *= scale;
    }
    // What was sent leaves the residual (and, with momentum correction, the velocity: DGC's momentum masking).
    T* velocity = momentum_ > 0 ? state_.get("velocity", bucket.index).data<T>() : nullptr;
    for (const std::int64_t i : chosen) {
      residual[i] = 0;
      if (velocity != nullptr) {
        velocity[i] = 0;
      }
    }
    return {static_cast<std::int64_t>(mine.bytes()), static_cast<std::int64_t>(bucket.gradient.bytes())};
  }

  template <typename T>
  void clipLocally(T* g, std::int64_t n, int ranks) const {
    if (clip_ <= 0) {
      return;
    }
    double squares = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      squares += static_cast<double>(g[i]) * static_cast<double>(g[i]);
    }
    const double limit = clip_ / std::sqrt(static_cast<double>(ranks));
    const double norm = std::sqrt(squares);
    if (norm > limit) {
      const auto factor = static_cast<T>(limit / norm);
      for (std::int64_t i = 0; i < n; ++i) {
        g[i] *= factor;
      }
    }
  }

  // The k elements of largest magnitude, in ascending index order (ties to the lower index, so every rank and
  // every run chooses the same).
  template <typename T>
  static std::vector<std::int64_t> largest(const T* v, std::int64_t n, std::int64_t k) {
    std::vector<std::int64_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    if (k < n) {
      // A NaN counts as the largest, so the order stays strict and a diverged gradient travels.
      const auto magnitude = [v](std::int64_t i) {
        return std::isnan(v[i]) ? std::numeric_limits<T>::infinity() : std::abs(v[i]);
      };
      const auto before = [&magnitude](std::int64_t a, std::int64_t b) {
        const T ma = magnitude(a);
        const T mb = magnitude(b);
        return ma > mb || (ma == mb && a < b);
      };
      std::nth_element(order.begin(), order.begin() + k, order.end(), before);
      order.resize(static_cast<std::size_t>(k));
    }
    std::sort(order.begin(), order.end());
    return order;
  }

  double ratio_;
  double momentum_;
  double clip_;
  std::int64_t warmupSteps_;
};

}  // namespace

std::unique_ptr<GradientCompressor> makeTopK(CompressorSpec& spec) {
  return std::make_unique<TopKCompressor>(spec);
}

}  // namespace strata::compression
