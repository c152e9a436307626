#pragma once

#include <cstdint>

#include "strata/graphs/graph.h"

namespace strata {

// Forward floating-point operations of a specialised graph; a multiply-add counts as two.
std::int64_t estimateForwardFlops(const Graph& graph);

}  // namespace strata
