#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "strata/tensor.h"

namespace strata {

using AttributeValue = std::variant<std::int64_t, float, std::string, std::vector<std::int64_t>, std::vector<float>,
                                    std::vector<std::string>, Tensor>;

// A node's attributes by name, with typed getters whose errors name the attribute and the expected type.
class Attributes {
 public:
  void set(const std::string& name, AttributeValue value) { values_[name] = std::move(value); }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  const std::map<std::string, AttributeValue>& all() const { return values_; }

  std::int64_t getInt(const std::string& name) const;
  std::int64_t getInt(const std::string& name, std::int64_t fallback) const;
  float getFloat(const std::string& name) const;
  float getFloat(const std::string& name, float fallback) const;
  std::string getString(const std::string& name) const;
  std::string getString(const std::string& name, const std::string& fallback) const;
  std::vector<std::int64_t> getInts(const std::string& name) const;
  std::vector<std::int64_t> getInts(const std::string& name, std::vector<std::int64_t> fallback) const;
  std::vector<float> getFloats(const std::string& name) const;
  const Tensor& getTensor(const std::string& name) const;

 private:
  template <typename T>
  const T& get(const std::string& name, const char* typeName) const;

  std::map<std::string, AttributeValue> values_;
};

}  // namespace strata
