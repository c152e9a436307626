#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "strata/attributes.h"
#include "strata/program.h"
#include "strata/tensor.h"

namespace strata {

inline constexpr int kNoValue = -1;

// A value of the graph: a graph input, an initializer, a constant or a node output.
struct Value {
  std::string name;
  TensorMeta meta;             // dims of -1 are unknown until specialisation
  Tensor constant;             // defined for initializers and folded constants
  bool isInitializer = false;  // came from the model's initializers (float ones are trainable parameters)
  int producer = kNoValue;     // index of the node that produces it
};

struct Node {
  std::string name;
  std::string opType;
  std::string domain;
  std::vector<int> inputs;   // value ids; kNoValue for absent optional inputs
  std::vector<int> outputs;  // value ids; kNoValue for absent optional outputs
  Attributes attrs;
  NodePhase phase = NodePhase::Forward;
  int gradientOf = -1;  // for backward nodes: index of the forward node whose gradient rule emitted it
};

// Strata's graph IR: values and nodes in topological order, with the graph's inputs (non-initializer) and outputs.
struct Graph {
  std::string name;
  std::string sourcePath;  // the file it came from, for error messages
  std::int64_t opsetVersion = 0;
  std::int64_t fileOpsetVersion = 0;  // the file's own, when the importer converted it to opsetVersion
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<int> inputs;
  std::vector<int> outputs;

  int addValue(Value value);
  // Adds a constant 1-D int64 value (a shape, axes) named `valueName`; returns its id.
  int addInt64s(const std::vector<std::int64_t>& numbers, std::string valueName);
  // The id of the value with this name, or kNoValue.
  int findValue(const std::string& valueName) const;
  // The node index of every consumer of each value.
  std::vector<std::vector<int>> consumers() const;
};

}  // namespace strata
