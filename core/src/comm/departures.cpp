#include "strata/comm/departures.h"

#include <fmt/format.h>

#include "strata/error.h"

namespace strata {

std::optional<std::string> getUnlessDeparted(Store& store, const std::string& key, int rank,
                                             std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string departed = departedKey(rank);
  for (;;) {
    if (store.tryWait({key}, std::chrono::milliseconds(200)).empty()) {
      return store.getString(key, timeout);
    }
    if (store.check({departed})) {
      return std::nullopt;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      fail("rank {} did not write '{}' within {} s (and has not departed)", rank, key,
           std::chrono::duration<double>(timeout).count());
    }
  }
}

}  // namespace strata
