#include "launch/environment_variables.h"

#include <charconv>
#include <cstdlib>

#include "strata/error.h"

namespace strata::cli::detail {

std::optional<std::string> environmentValue(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::nullopt : std::optional<std::string>(value);
}

int integerVariable(const char* name, const std::string& value, int low, const char* what) {
  int result = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, result);
  if (value.empty() || ec != std::errc() || ptr != end || result < low) {
    fail("environment variable {}='{}' is not {}", name, value, what);
  }
  return result;
}

int nonNegativeVariable(const char* name, const std::string& value) {
  return integerVariable(name, value, 0, "a non-negative integer");
}

int positiveVariable(const char* name, const std::string& value) {
  return integerVariable(name, value, 1, "a positive integer");
}

int portVariable(const char* name, const std::string& value) {
  const int result = integerVariable(name, value, 1, "a port number (1-65535)");
  if (result > 65535) {
    fail("environment variable {}='{}' is not a port number (1-65535)", name, value);
  }
  return result;
}

}  // namespace strata::cli::detail
