#include "common/strategy_options.h"

#include "strata/error.h"

namespace strata::cli {

std::map<std::string, std::string> parseStrategyOptions(const std::vector<std::string>& pairs) {
  std::map<std::string, std::string> result;
  for (const std::string& pair : pairs) {
    const auto eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      fail("--strategy-opt '{}' is not key=value", pair);
    }
    result[pair.substr(0, eq)] = pair.substr(eq + 1);
  }
  return result;
}

}  // namespace strata::cli
