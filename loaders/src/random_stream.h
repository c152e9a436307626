#pragma once

#include <cstdint>
#include <initializer_list>

namespace strata {

// SplitMix64: a tiny, fast generator whose streams are cheap to derive from (seed, epoch, index) keys. The loaders
// use it instead of <random> distributions because those differ between standard libraries, and shuffles and
// synthetic data must be identical on every rank and machine.
class RandomStream {
 public:
  explicit RandomStream(std::uint64_t seed) : state_(seed) {}
  // A stream keyed by several values, e.g. RandomStream::keyed({seed, epoch, index}).
  static RandomStream keyed(std::initializer_list<std::uint64_t> keys) {
    std::uint64_t h = 0x243f6a8885a308d3ULL;
    for (std::uint64_t k : keys) {
      h = mix(h ^ mix(k + 0x9e3779b97f4a7c15ULL));
    }
    return RandomStream(h);
  }

  static std::uint64_t mix(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  std::uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix(state_);
  }
  // Uniform in [0, bound); the modulo bias (bound / 2^64) is far below anything observable here.
  std::uint64_t below(std::uint64_t bound) { return next() % bound; }

 private:
  std::uint64_t state_;
};

}  // namespace strata
