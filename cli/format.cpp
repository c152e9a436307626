#include "format.h"

#include <array>

#include <fmt/format.h>

namespace strata::cli {

std::string humanCount(double value) {
  static constexpr std::array<const char*, 5> kUnits = {"", " K", " M", " G", " T"};
  std::size_t unit = 0;
  while (value >= 1000.0 && unit + 1 < kUnits.size()) {
    value /= 1000.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{:.0f}", value) : fmt::format("{:.2f}{}", value, kUnits[unit]);
}

std::string humanBytes(std::int64_t bytes) {
  static constexpr std::array<const char*, 5> kUnits = {"B", "KiB", "MiB", "GiB", "TiB"};
  auto value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < kUnits.size()) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", value, kUnits[unit]);
}

}  // namespace strata::cli
