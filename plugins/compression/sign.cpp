// sign: 1-bit compression with error feedback (EF-SignSGD, Karimireddy et al., 2019). Each rank adds its residual
// to the gradient (p = g + e), sends the signs of p packed 32 to a word and one scale per parameter (the mean
// magnitude ||p||_1 / d of that parameter's elements), and keeps e = p - scale * sign(p). The average of the ranks'
// decompressed vectors comes from one all-gather. A zero counts as positive.
#include <cmath>
#include <cstring>
#include <vector>

#include "compressor_state.h"
#include "compressors.h"

namespace strata::compression {
namespace {

class SignCompressor final : public HostCompressor<SignCompressor> {
 public:
  explicit SignCompressor(CompressorSpec& spec) : HostCompressor(spec.text()) {}

  void prepareBucket(const GradientBucket& bucket) {
    state_.add("residual", bucket.index, bucket.gradient.dtype(), bucket.gradient.numel());
  }

 private:
  friend class HostCompressor<SignCompressor>;

  // The payload, in float32 slots (Note [Indices in float slots] in top_k.cpp): the sign words, then the scales.
  template <typename T>
  CompressionTraffic reduce(GradientBucket& bucket, ProcessGroup& group, std::chrono::milliseconds timeout) {
    const std::int64_t n = bucket.gradient.numel();
    const auto segments = static_cast<std::int64_t>(bucket.segments.size());
    const std::int64_t words = (n + 31) / 32;
    const std::int64_t slots = words + segments;
    const int ranks = group.size();
    T* g = bucket.gradient.data<T>();
    T* residual = state_.get("residual", bucket.index).data<T>();

    Tensor mine = Tensor::empty(DType::Float32, {slots}, MemoryCategory::Communication);
    Tensor all = Tensor::empty(DType::Float32, {slots * ranks}, MemoryCategory::Communication);
    std::vector<std::uint32_t> bits(static_cast<std::size_t>(words), 0);
    float* scales = mine.data<float>() + words;
    for (std::int64_t s = 0; s < segments; ++s) {
      const GradientSegment& segment = bucket.segments[static_cast<std::size_t>(s)];
      double magnitude = 0;
      for (std::int64_t i = segment.offset; i < segment.offset + segment.numel(); ++i) {
        residual[i] += g[i];  // p = g + e, kept in the residual until e is known
        magnitude += std::abs(static_cast<double>(residual[i]));
      }
      const auto scale =
          static_cast<float>(magnitude / static_cast<double>(std::max<std::int64_t>(segment.numel(), 1)));
      scales[s] = scale;
      for (std::int64_t i = segment.offset; i < segment.offset + segment.numel(); ++i) {
        const bool negative = std::signbit(residual[i]) && residual[i] != 0;
        if (!negative) {
          bits[static_cast<std::size_t>(i / 32)] |= 1U << (i % 32);
        }
        residual[i] -= negative ? -static_cast<T>(scale) : static_cast<T>(scale);
      }
    }
    std::memcpy(mine.data<float>(), bits.data(), bits.size() * sizeof(std::uint32_t));
    group.allGather(mine, all)->wait(timeout);

    std::fill(g, g + n, T(0));
    std::vector<std::uint32_t> theirs(static_cast<std::size_t>(words));
    for (int r = 0; r < ranks; ++r) {
      const float* part = all.data<float>() + slots * r;
      std::memcpy(theirs.data(), part, static_cast<std::size_t>(words) * sizeof(std::uint32_t));
      for (std::int64_t s = 0; s < segments; ++s) {
        const GradientSegment& segment = bucket.segments[static_cast<std::size_t>(s)];
        const auto scale = static_cast<T>(part[words + s]);
        for (std::int64_t i = segment.offset; i < segment.offset + segment.numel(); ++i) {
          g[i] += ((theirs[static_cast<std::size_t>(i / 32)] >> (i % 32)) & 1U) != 0 ? scale : -scale;
        }
      }
    }
    const T average = T(1) / static_cast<T>(ranks);
    for (std::int64_t i = 0; i < n; ++i) {
      g[i] *= average;
    }
    return {static_cast<std::int64_t>(mine.bytes()), static_cast<std::int64_t>(bucket.gradient.bytes())};
  }
};

}  // namespace

std::unique_ptr<GradientCompressor> makeSign(CompressorSpec& spec) {
  return std::make_unique<SignCompressor>(spec);
}

}  // namespace strata::compression
