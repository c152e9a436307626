#pragma once

#include <cstdint>
#include <string>

namespace strata::cli {

// 1234567 -> "1.23 M"; bytes -> "4.71 MiB".
std::string humanCount(double value);
std::string humanBytes(std::int64_t bytes);
// "24GiB", "1.5 GB", "512M", "1000000" -> bytes: KiB/MiB/GiB/TiB and K/M/G/T are powers of 1024, kB/KB/MB/GB/TB
// powers of 1000, B or nothing bytes (case-insensitive). Throws Error naming `flag` and the text otherwise.
std::int64_t parseByteSize(const std::string& text, const std::string& flag);

}  // namespace strata::cli
