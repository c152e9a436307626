#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::cli {

// One `strata train` run of a comparison.
struct CompareConfiguration {
  std::string name;  // its run directory under OUT/runs/, unique: "default_cnn-fsdp-shard-full-n2"
  std::string
      label;  // "fsdp shard=full", with a listed configuration's own arguments: "ps mode=async (--slow-rank 3:2)"
  std::string model;  // the .onnx file; empty: the bundled CNN
  std::string strategy;
  std::vector<std::string> strategyOptions;  // "shard=full"
  int worldSize = 1;
  std::vector<std::string> trainArgs;  // the comparison's common arguments, then the configuration's own
};

// What `strata compare` runs: every model x strategy x world size, plus configurations listed one by one (with
// arguments of their own, such as --slow-rank). Read from flags or from a JSON or YAML spec file (docs/compare.md):
//   {"models": ["vgg16.onnx"], "strategies": ["ddp", "fsdp shard=full"], "world_sizes": [2, 4],
//    "train_args": ["--data", "cifar10:data", "--epochs", "10"],
//    "configurations": [{"strategy": "ps mode=async", "world_size": 4, "train_args": ["--slow-rank", "3:2"]}]}
struct CompareSpec {
  std::vector<std::string> models;      // empty: the bundled CNN
  std::vector<std::string> strategies;  // "NAME [K=V ...]"
  std::vector<int> worldSizes;
  std::vector<std::string> trainArgs;
  std::vector<CompareConfiguration> configurations;  // listed one by one (name and label filled in by expand)
};

// Throws Error naming `where` (the file) and the field that is wrong.
CompareSpec compareSpecFromJson(const nlohmann::json& document, const std::string& where);
nlohmann::json compareSpecToJson(const CompareSpec& spec);

// The runs, in order: models x strategies x world sizes, then the listed ones. Refuses an empty comparison, a
// world size below 1, train arguments that compare sets itself (--nproc, --strategy, --strategy-opt, --out,
// --resume) and two configurations with one name.
std::vector<CompareConfiguration> expandConfigurations(const CompareSpec& spec);

// "fsdp shard=full" -> {"fsdp", {"shard=full"}}; throws Error on an empty text or an option without '='.
std::pair<std::string, std::vector<std::string>> parseStrategyText(const std::string& text);

}  // namespace strata::cli
