#pragma once

#include "strata/graphs/graph.h"

namespace strata {

// Sets every value's producer from the graph's nodes, after a pass replaced or reordered them (values no node
// writes any more get kNoValue).
void relinkProducers(Graph& graph);

}  // namespace strata
