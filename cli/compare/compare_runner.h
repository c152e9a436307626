#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare/compare_spec.h"

namespace strata::cli {

// Where one configuration of a comparison stands, kept in OUT/comparison.json after every change.
struct RunState {
  explicit RunState(std::string n = "", std::string s = "pending") : name(std::move(n)), status(std::move(s)) {}
  std::string name;
  std::string status;  // pending | running | done | failed
  std::optional<int> exitCode;
  std::string reason;  // why it failed
  double durationS = 0.0;
};

struct CompareRunOptions {
  std::filesystem::path out;
  bool predict = true;  // `strata plan` before each run, for the report's prediction errors
  int masterPort = 29500;
};

// Note [Comparison runs]: each configuration is an ordinary `strata train` run in its own directory
// (OUT/runs/<name>, its output in train.log there), so it can be inspected or resumed on its own. A failed run is
// recorded with its reason and the comparison goes on; the state is written after every change, so `--resume`
// reruns only what did not finish (a run left `running` by an interrupted comparison starts again from scratch).
class ComparisonRunner {
 public:
  ComparisonRunner(CompareSpec spec, CompareRunOptions options);
  // Reads OUT/comparison.json; throws Error naming the file when it is missing or damaged.
  static ComparisonRunner resume(const std::filesystem::path& out, CompareRunOptions options);

  // Runs every configuration not done yet, printing progress with an ETA; returns how many failed.
  int runAll();

  const std::vector<CompareConfiguration>& configurations() const { return configurations_; }
  const std::vector<RunState>& states() const { return states_; }
  const CompareSpec& spec() const { return spec_; }
  std::filesystem::path runDir(const CompareConfiguration& c) const { return options_.out / "runs" / c.name; }

 private:
  void saveState() const;
  void runOne(std::size_t index, std::size_t position, std::size_t count, double meanS);
  void predict(const CompareConfiguration& c);

  CompareSpec spec_;
  CompareRunOptions options_;
  std::vector<CompareConfiguration> configurations_;
  std::vector<RunState> states_;
};

// The `strata train` arguments of one configuration (after the program name).
std::vector<std::string> trainArguments(const CompareConfiguration& c, const std::filesystem::path& runDir,
                                        int masterPort);
// The `strata plan` arguments that predict one configuration into `jsonPath`.
std::vector<std::string> planArguments(const CompareConfiguration& c, const std::filesystem::path& jsonPath);
// Why `strata COMMAND` failed (wait status `status`), from its log: the launcher's last "error:" line, else the last
// line naming an error.
std::string failureReason(const std::filesystem::path& log, int status, const std::string& command);

}  // namespace strata::cli
