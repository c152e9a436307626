#include "common/yaml_document.h"

#include <charconv>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "strata/error.h"

namespace strata::cli {
namespace {

std::string position(const std::string& path, const YAML::Mark& mark) {
  // yaml-cpp counts lines and columns from 0.
  return mark.is_null() ? path : fmt::format("{}:{}:{}", path, mark.line + 1, mark.column + 1);
}

// An unquoted scalar's JSON value (YAML 1.2's core schema, as PyYAML and most tools read spec files).
nlohmann::json plainScalar(const std::string& text) {
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL")
    return nullptr;
  if (text == "true" || text == "True" || text == "TRUE")
    return true;
  if (text == "false" || text == "False" || text == "FALSE")
    return false;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  std::int64_t integer = 0;
  const char* digits = begin + (text[0] == '+' ? 1 : 0);
  if (auto [p, ec] = std::from_chars(digits, end, integer); ec == std::errc() && p == end)
    return integer;
  double number = 0;
  if (auto [p, ec] = std::from_chars(digits, end, number); ec == std::errc() && p == end && std::isfinite(number))
    return number;
  return text;
}

nlohmann::json toJson(const YAML::Node& node, const std::string& path) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      // "!" is the tag of a quoted scalar, "?" of a plain one.
      return node.Tag() == "!" ? nlohmann::json(node.Scalar()) : plainScalar(node.Scalar());
    case YAML::NodeType::Sequence: {
      nlohmann::json array = nlohmann::json::array();
      for (const YAML::Node& item : node)
        array.push_back(toJson(item, path));
      return array;
    }
    case YAML::NodeType::Map: {
      nlohmann::json object = nlohmann::json::object();
      for (const auto& entry : node) {
        if (!entry.first.IsScalar())
          fail("{}: not valid YAML for a spec: a mapping key is not a scalar", position(path, entry.first.Mark()));
        object[entry.first.Scalar()] = toJson(entry.second, path);
      }
      return object;
    }
  }
  return nullptr;
}

}  // namespace

bool isYamlPath(const std::string& path) {
  const std::string extension = std::filesystem::path(path).extension().string();
  return extension == ".yaml" || extension == ".yml";
}

nlohmann::json readYamlAsJson(const std::string& path) {
  YAML::Node document;
  try {
    document = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    fail("{}: cannot read the file", path);
  } catch (const YAML::Exception& e) {
    fail("{}: not valid YAML: {}", position(path, e.mark), e.msg);
  }
  return toJson(document, path);
}

}  // namespace strata::cli
