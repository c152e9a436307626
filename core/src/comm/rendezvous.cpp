#include "strata/comm/rendezvous.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "strata/error.h"

namespace strata {

void rendezvous(Store& store, const RendezvousOptions& options) {
  STRATA_CHECK(options.worldSize > 0 && options.rank >= 0 && options.rank < options.worldSize,
               "rendezvous: rank {} is not in a world of {}", options.rank, options.worldSize);
  store.add(options.prefix + "/joined", 1);
  store.setString(fmt::format("{}/rank/{}", options.prefix, options.rank), "1");

  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(options.worldSize));
  for (int r = 0; r < options.worldSize; ++r) {
    keys.push_back(fmt::format("{}/rank/{}", options.prefix, r));
  }
  const std::vector<std::string> missingKeys = store.tryWait(keys, options.timeout);
  if (missingKeys.empty()) {
    return;
  }
  std::vector<int> missing;
  for (int r = 0; r < options.worldSize; ++r) {
    if (std::find(missingKeys.begin(), missingKeys.end(), keys[static_cast<std::size_t>(r)]) != missingKeys.end()) {
      missing.push_back(r);
    }
  }
  fail("rendezvous at {} timed out after {:g} s: {} {} of {} never arrived", options.where,
       static_cast<double>(options.timeout.count()) / 1000.0, missing.size() == 1 ? "rank" : "ranks",
       fmt::join(missing, ", "), options.worldSize);
}

}  // namespace strata
