#pragma once

#include <map>
#include <string>
#include <vector>

namespace strata::cli {

// --strategy-opt key=value pairs (repeatable) as a map; throws Error naming a pair that is not key=value.
std::map<std::string, std::string> parseStrategyOptions(const std::vector<std::string>& pairs);

}  // namespace strata::cli
