#include "compare/compare_spec.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/model_options.h"
#include "strata/error.h"

namespace strata::cli {
namespace {

// The flags a comparison owns: each configuration's run sets them.
const std::set<std::string> kOwnedFlags = {"--nproc", "--strategy", "--strategy-opt", "--out", "--resume"};

void checkTrainArgs(const std::vector<std::string>& args, const std::string& where) {
  for (const std::string& arg : args) {
    const std::string flag = arg.substr(0, arg.find('='));
    STRATA_CHECK(!kOwnedFlags.contains(flag),
                 "{}: train argument '{}' is set by strata compare for each configuration (use \"strategies\", "
                 "\"world_sizes\" or \"configurations\")",
                 where, arg);
  }
}

template <typename T>
T fieldOr(const nlohmann::json& object, const char* key, T fallback, const std::string& where) {
  if (!object.contains(key)) {
    return fallback;
  }
  try {
    return object.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: field \"{}\" has the wrong type ({}): {}", where, key, object.at(key).dump(), e.what());
  }
}

// A train_args list: strings, and numbers or booleans as their text (a YAML spec's unquoted `--epochs, 10`).
std::vector<std::string> trainArgsOr(const nlohmann::json& object, const std::string& where) {
  std::vector<std::string> args;
  if (!object.contains("train_args"))
    return args;
  const nlohmann::json& list = object.at("train_args");
  STRATA_CHECK(list.is_array(), "{}: field \"train_args\" is a list of arguments, not {}", where, list.dump());
  for (std::size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& arg = list[i];
    if (arg.is_string())
      args.push_back(arg.get<std::string>());
    else if (arg.is_number() || arg.is_boolean())
      args.push_back(arg.dump());
    else
      fail("{}: train_args[{}] is {}, not a string or a number", where, i, arg.dump());
  }
  return args;
}

// "default_cnn-fsdp-shard-full-n2": what a directory name may hold.
std::string slug(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_';
    if (keep) {
      out += c;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') {
    out.pop_back();
  }
  return out;
}

CompareConfiguration configuration(const std::string& model, const std::string& strategyText, int worldSize,
                                   std::vector<std::string> trainArgs, const std::string& where) {
  STRATA_CHECK(worldSize >= 1, "{}: world size {} of '{}' is below 1", where, worldSize, strategyText);
  CompareConfiguration c;
  std::tie(c.strategy, c.strategyOptions) = parseStrategyText(strategyText);
  c.label =
      c.strategyOptions.empty() ? c.strategy : fmt::format("{} {}", c.strategy, fmt::join(c.strategyOptions, " "));
  c.model = model;
  c.worldSize = worldSize;
  c.trainArgs = std::move(trainArgs);
  c.name = fmt::format("{}-{}-n{}", slug(modelNameOf(c)), slug(c.label), worldSize);
  return c;
}

}  // namespace

std::optional<std::string> trainArgValue(const std::vector<std::string>& args, const std::string& flag) {
  std::optional<std::string> value;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag && i + 1 < args.size()) {
      value = args[i + 1];
    } else if (args[i].starts_with(flag + "=")) {
      value = args[i].substr(flag.size() + 1);
    }
  }
  return value;
}

std::string modelPathOf(const CompareConfiguration& c) {
  return c.model.empty() ? defaultModelPathForData(trainArgValue(c.trainArgs, "--data").value_or("")) : c.model;
}

std::string modelNameOf(const CompareConfiguration& c) {
  return c.model.empty() ? defaultModelNameForData(trainArgValue(c.trainArgs, "--data").value_or(""))
                         : std::filesystem::path(c.model).stem().string();
}

std::pair<std::string, std::vector<std::string>> parseStrategyText(const std::string& text) {
  std::istringstream words(text);
  std::string strategy;
  STRATA_CHECK(static_cast<bool>(words >> strategy), "strategy '{}' is empty", text);
  std::vector<std::string> options;
  for (std::string word; words >> word;) {
    STRATA_CHECK(word.find('=') != std::string::npos && word.front() != '=',
                 "strategy '{}': option '{}' is not KEY=VALUE", text, word);
    options.push_back(word);
  }
  return {strategy, options};
}

CompareSpec compareSpecFromJson(const nlohmann::json& document, const std::string& where) {
  STRATA_CHECK(document.is_object(), "{}: a comparison spec is an object (a JSON object or a YAML mapping), not {}",
               where, document.type_name());
  static const std::set<std::string> known = {"models", "strategies", "world_sizes", "train_args", "configurations"};
  for (const auto& [key, value] : document.items()) {
    STRATA_CHECK(known.contains(key), "{}: unknown field \"{}\" (known: {})", where, key, fmt::join(known, ", "));
  }
  CompareSpec spec;
  spec.models = fieldOr(document, "models", std::vector<std::string>{}, where);
  spec.strategies = fieldOr(document, "strategies", std::vector<std::string>{}, where);
  spec.worldSizes = fieldOr(document, "world_sizes", std::vector<int>{}, where);
  spec.trainArgs = trainArgsOr(document, where);
  const nlohmann::json listed = document.value("configurations", nlohmann::json::array());
  STRATA_CHECK(listed.is_array(), "{}: \"configurations\" is a list", where);
  for (std::size_t i = 0; i < listed.size(); ++i) {
    const std::string at = fmt::format("{}: configurations[{}]", where, i);
    const nlohmann::json& item = listed[i];
    STRATA_CHECK(item.is_object() && item.contains("strategy") && item.contains("world_size"),
                 "{}: needs \"strategy\" and \"world_size\"", at);
    CompareConfiguration c;
    c.label = fieldOr(item, "strategy", std::string(), at);
    c.worldSize = fieldOr(item, "world_size", 0, at);
    c.model = fieldOr(item, "model", std::string(), at);
    c.trainArgs = trainArgsOr(item, at);
    c.name = fieldOr(item, "name", std::string(), at);
    spec.configurations.push_back(std::move(c));
  }
  return spec;
}

nlohmann::json compareSpecToJson(const CompareSpec& spec) {
  nlohmann::json listed = nlohmann::json::array();
  for (const CompareConfiguration& c : spec.configurations) {
    nlohmann::json item = {{"strategy", c.label}, {"world_size", c.worldSize}, {"train_args", c.trainArgs}};
    if (!c.model.empty()) {
      item["model"] = c.model;
    }
    if (!c.name.empty()) {
      item["name"] = c.name;
    }
    listed.push_back(std::move(item));
  }
  return {{"models", spec.models},
          {"strategies", spec.strategies},
          {"world_sizes", spec.worldSizes},
          {"train_args", spec.trainArgs},
          {"configurations", listed}};
}

std::vector<CompareConfiguration> expandConfigurations(const CompareSpec& spec) {
  checkTrainArgs(spec.trainArgs, "train arguments");
  STRATA_CHECK(spec.strategies.empty() == spec.worldSizes.empty(),
               "a comparison needs strategies and world sizes together ({} strategies, {} world sizes)",
               spec.strategies.size(), spec.worldSizes.size());
  std::vector<CompareConfiguration> runs;
  const std::vector<std::string> models = spec.models.empty() ? std::vector<std::string>{""} : spec.models;
  for (const std::string& model : models) {
    for (const std::string& strategy : spec.strategies) {
      for (const int worldSize : spec.worldSizes) {
        runs.push_back(configuration(model, strategy, worldSize, spec.trainArgs, "strategies"));
      }
    }
  }
  for (std::size_t i = 0; i < spec.configurations.size(); ++i) {
    const CompareConfiguration& listed = spec.configurations[i];
    const std::string where = fmt::format("configurations[{}]", i);
    checkTrainArgs(listed.trainArgs, where);
    std::vector<std::string> args = spec.trainArgs;
    args.insert(args.end(), listed.trainArgs.begin(), listed.trainArgs.end());
    const std::string model = listed.model.empty() && !spec.models.empty() ? spec.models.front() : listed.model;
    CompareConfiguration c = configuration(model, listed.label, listed.worldSize, std::move(args), where);
    if (!listed.trainArgs.empty()) {  // "ps mode=async (--slow-rank 3:2)": told apart from the grid's runs
      c.label = fmt::format("{} ({})", c.label, fmt::join(listed.trainArgs, " "));
    }
    if (!listed.name.empty()) {
      c.name = slug(listed.name);
    } else if (!listed.trainArgs.empty()) {
      c.name = fmt::format("{}-{}", c.name, slug(fmt::format("{}", fmt::join(listed.trainArgs, " "))));
    }
    runs.push_back(std::move(c));
  }
  STRATA_CHECK(!runs.empty(),
               "a comparison needs at least one configuration (strategies and world sizes, or "
               "\"configurations\" in a spec file)");
  std::set<std::string> names;
  for (const CompareConfiguration& c : runs) {
    STRATA_CHECK(names.insert(c.name).second,
                 "two configurations would share the run directory '{}' (give one a \"name\")", c.name);
  }
  return runs;
}

}  // namespace strata::cli
