#include "strata/attributes.h"

namespace strata {

template <typename T>
const T& Attributes::get(const std::string& name, const char* typeName) const {
  auto it = values_.find(name);
  if (it == values_.end()) {
    fail("required attribute '{}' is missing", name);
  }
  const T* value = std::get_if<T>(&it->second);
  if (value == nullptr) {
    fail("attribute '{}' must be {}", name, typeName);
  }
  return *value;
}

std::int64_t Attributes::getInt(const std::string& name) const {
  return get<std::int64_t>(name, "an int");
}

std::int64_t Attributes::getInt(const std::string& name, std::int64_t fallback) const {
  return has(name) ? getInt(name) : fallback;
}

float Attributes::getFloat(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end()) {
    if (const auto* asInt = std::get_if<std::int64_t>(&it->second)) {
      return static_cast<float>(*asInt);
    }
  }
  return get<float>(name, "a float");
}

float Attributes::getFloat(const std::string& name, float fallback) const {
  return has(name) ? getFloat(name) : fallback;
}

std::string Attributes::getString(const std::string& name) const {
  return get<std::string>(name, "a string");
}

std::string Attributes::getString(const std::string& name, const std::string& fallback) const {
  return has(name) ? getString(name) : fallback;
}

std::vector<std::int64_t> Attributes::getInts(const std::string& name) const {
  return get<std::vector<std::int64_t>>(name, "a list of ints");
}

std::vector<std::int64_t> Attributes::getInts(const std::string& name, std::vector<std::int64_t> fallback) const {
  return has(name) ? getInts(name) : std::move(fallback);
}

std::vector<float> Attributes::getFloats(const std::string& name) const {
  return get<std::vector<float>>(name, "a list of floats");
}

const Tensor& Attributes::getTensor(const std::string& name) const {
  return get<Tensor>(name, "a tensor");
}

}  // namespace strata
