#pragma once

#include <cstdint>
#include <string>

namespace strata::cli {

// 1234567 -> "1.23 M"; bytes -> "4.71 MiB".
std::string humanCount(double value);
std::string humanBytes(std::int64_t bytes);

}  // namespace strata::cli
