#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace strata {

// The one exception type Strata throws for bad input or failed operations. Messages say what, where and why.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace strata

#define STRATA_CHECK(cond, ...)    \
  do {                             \
    if (!(cond)) {                 \
      ::strata::fail(__VA_ARGS__); \
    }                              \
  } while (false)
