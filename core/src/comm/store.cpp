#include "strata/comm/store.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "strata/error.h"

namespace strata {

void Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const std::vector<std::string> missing = tryWait(keys, timeout);
  if (!missing.empty()) {
    fail("store wait timed out after {:g} s: keys {} missing", static_cast<double>(timeout.count()) / 1000.0,
         fmt::join(missing, ", "));
  }
}

void Store::setString(const std::string& key, std::string_view value) {
  set(key, Bytes(value.begin(), value.end()));
}

std::string Store::getString(const std::string& key, std::chrono::milliseconds timeout) {
  const Bytes value = get(key, timeout);
  return std::string(value.begin(), value.end());
}

}  // namespace strata
