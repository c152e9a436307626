#include "strata/graphs/graph.h"

#include <algorithm>

namespace strata {

int Graph::addValue(Value value) {
  values.push_back(std::move(value));
  return static_cast<int>(values.size()) - 1;
}

int Graph::addInt64s(const std::vector<std::int64_t>& numbers, std::string valueName) {
  Value value;
  value.name = std::move(valueName);
  value.constant = Tensor::empty(DType::Int64, {static_cast<std::int64_t>(numbers.size())});
  std::copy(numbers.begin(), numbers.end(), value.constant.data<std::int64_t>());
  value.meta = value.constant.meta();
  return addValue(std::move(value));
}

int Graph::findValue(const std::string& valueName) const {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i].name == valueName) {
      return static_cast<int>(i);
    }
  }
  return kNoValue;
}

std::vector<std::vector<int>> Graph::consumers() const {
  std::vector<std::vector<int>> result(values.size());
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    for (int v : nodes[n].inputs) {
      if (v != kNoValue && (result[static_cast<std::size_t>(v)].empty() ||
                            result[static_cast<std::size_t>(v)].back() != static_cast<int>(n))) {
        result[static_cast<std::size_t>(v)].push_back(static_cast<int>(n));
      }
    }
  }
  return result;
}

}  // namespace strata
