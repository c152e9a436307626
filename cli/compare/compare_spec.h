#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::cli {

// One `strata train` run of a comparison.
struct CompareConfiguration {
  std::string name;  // its run directory under OUT/runs/, unique: "default_cnn-fsdp-shard-full-n2"
  std::string
      label;  // "fsdp shard=full", with a listed configuration's own arguments: "ps mode=async (--slow-rank 3:2)"
  std::string model;  // the .onnx file; empty: train's default for the data (the bundled CNN or GPT)
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

// The value of "--flag value" or "--flag=value" in train arguments (the last one given); nullopt when absent.
std::optional<std::string> trainArgValue(const std::vector<std::string>& args, const std::string& flag);
// The model a configuration trains: its own, or `strata train`'s default for its --data.
std::string modelPathOf(const CompareConfiguration& c);
// Its name in run directories and results: the file's stem, or "default_cnn" / "default_gpt".
std::string modelNameOf(const CompareConfiguration& c);

// "fsdp shard=full" -> {"fsdp", {"shard=full"}}; throws Error on an empty text or an option without '='.
std::pair<std::string, std::vector<std::string>> parseStrategyText(const std::string& text);

}  // namespace strata::cli
