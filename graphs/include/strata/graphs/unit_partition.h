#pragma once

// The FSDP unit partition pass: cuts the plan's parameters, in execution (first-use) order, into contiguous units
// (StrategyRequirements::units), so each unit can live in flat buffers of its own (ParameterStore's unitOf).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "strata/sdk/strategy.h"

namespace strata {

// What the pass needs of one parameter.
struct UnitCandidate {
  std::string name;
  std::int64_t elements = 0;
};

// The module a parameter belongs to: its name up to the last '.' or '/' ("layer1.0.conv1" for
// "layer1.0.conv1.weight", "/layer1/conv" for "/layer1/conv/weight"); "" when the name has neither.
std::string_view modulePath(std::string_view parameterName);

// The unit of each parameter (0, 1, 2, ... non-decreasing), for parameters given in execution order.
// Kind::None puts every parameter in unit 0.
std::vector<int> partitionUnits(const std::vector<UnitCandidate>& parameters, const UnitPartition& partition);

}  // namespace strata
