#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace strata::cli {

// Reads a YAML file (yaml-cpp) as the JSON document it spells, so that YAML and JSON spec files go through one
// parser: mappings become objects, sequences arrays; an unquoted scalar that reads as an integer, a number, a
// boolean (true/false) or null (~, null, empty) becomes that, anything else (and every quoted scalar) a string.
// Throws Error "PATH:LINE:COLUMN: not valid YAML: ..." for a syntax error, and names the position of a mapping key
// that is not a scalar (JSON has only text keys).
nlohmann::json readYamlAsJson(const std::string& path);

// Whether `path` names a YAML file (.yaml or .yml).
bool isYamlPath(const std::string& path);

}  // namespace strata::cli
