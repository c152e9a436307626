#pragma once

#include <vector>

#include "strata/graphs/graph.h"

namespace strata {

// Sets every value's producer from the graph's nodes, after a pass replaced or reordered them (values no node
// writes any more get kNoValue).
void relinkProducers(Graph& graph);

// How many nodes read each value, plus one for each listing among the graph's outputs (read from outside).
std::vector<int> readerCounts(const Graph& graph);

// The node that alone reads value `id` (given the graph's readerCounts and consumers), or kNoValue when it has
// several readers, none, or is also a graph output: the single reader a fusion pass may absorb.
int soleNodeReader(const std::vector<int>& readers, const std::vector<std::vector<int>>& consumers, int id);

// Removes the nodes marked in `dropped` (one flag per node) and relinks the producers: what a fusion pass does last.
void dropNodes(Graph& graph, const std::vector<bool>& dropped);

}  // namespace strata
