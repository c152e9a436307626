#include "common/format.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "strata/error.h"

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

std::int64_t parseByteSize(const std::string& text, const std::string& flag) {
  static const std::map<std::string, double> kUnits = {{"", 1.0},
                                                       {"b", 1.0},
                                                       {"k", 1024.0},
                                                       {"kib", 1024.0},
                                                       {"kb", 1e3},
                                                       {"m", 1048576.0},
                                                       {"mib", 1048576.0},
                                                       {"mb", 1e6},
                                                       {"g", 1073741824.0},
                                                       {"gib", 1073741824.0},
                                                       {"gb", 1e9},
                                                       {"t", 1099511627776.0},
                                                       {"tib", 1099511627776.0},
                                                       {"tb", 1e12}};
  std::size_t end = 0;
  double value = -1;
  try {
    value = std::stod(text, &end);
  } catch (const std::logic_error&) {
    end = 0;
  }
  std::string unit = text.substr(std::min(end, text.size()));
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::tolower(c); });
  const auto found = kUnits.find(unit);
  if (end == 0 || found == kUnits.end() || !std::isfinite(value) || value <= 0 || value * found->second > 9.0e18) {
    fail(
        "{} {}: expected a positive size such as 24GiB, 512MiB, 16GB or a number of bytes (KiB/MiB/GiB/TiB and "
        "K/M/G/T are powers of 1024, KB/MB/GB/TB powers of 1000)",
        flag, text);
  }
  return static_cast<std::int64_t>(std::llround(value * found->second));
}

}  // namespace strata::cli
