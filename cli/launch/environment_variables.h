#pragma once

// The environment variables a launcher or a rank reads, as whole values that either parse or name the variable.
// The parsers of rank_environment.h and slurm_lists.h take them through an EnvironmentLookup, so they stay pure and
// their tests need no real environment.

#include <functional>
#include <optional>
#include <string>

namespace strata::cli::detail {

// A variable's value by name; nullopt when it is unset.
using EnvironmentLookup = std::function<std::optional<std::string>(const char* name)>;

// This process's own environment (getenv): the lookup outside tests.
std::optional<std::string> environmentValue(const char* name);

// A whole decimal integer of at least `low`; anything else throws Error naming the variable and its value, e.g.
// "environment variable RANK='x' is not a non-negative integer".
int integerVariable(const char* name, const std::string& value, int low, const char* what);
int nonNegativeVariable(const char* name, const std::string& value);
int positiveVariable(const char* name, const std::string& value);
int portVariable(const char* name, const std::string& value);  // 1-65535

}  // namespace strata::cli::detail
