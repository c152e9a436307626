#pragma once

#include <cmath>
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
  // Uniform in [0, 1) with 24 bits, exactly representable as float.
  float uniform() { return static_cast<float>(next() >> 40) * 0x1.0p-24f; }
  // Standard normal by Box-Muller (one value per call; simplicity over speed).
  float normal() {
    const float u1 = 1.0f - uniform();  // (0, 1], so the log is finite
    const float u2 = uniform();
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795864f * u2);
  }

 private:
  std::uint64_t state_;
};

}  // namespace strata
