#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands/commands.h"
#include "common/yaml_document.h"
#include "compare/compare_report.h"
#include "compare/compare_results.h"
#include "compare/compare_runner.h"
#include "strata/error.h"

namespace fs = std::filesystem;

namespace strata::cli {
namespace {

struct CompareOptions {
  std::vector<std::string> models;
  std::vector<std::string> strategies;
  std::vector<int> worldSizes;
  std::string specFile;
  std::string out;
  std::string resume;
  bool noPredict = false;
  bool reportOnly = false;
  bool dryRun = false;
  int masterPort = 29500;
  std::vector<std::string> trainArgs;  // after --
};

// "AMD EPYC 9R14 (avx512f avx2), 2 cores": what the figures were measured on.
nlohmann::json describeHost() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string model = "unknown CPU";
  std::set<std::string> isa;
  for (std::string line; std::getline(cpuinfo, line);) {
    const auto value = [&] { return line.substr(line.find(':') + 2); };
    if (line.starts_with("model name") && model == "unknown CPU") {
      model = value();
    } else if (line.starts_with("flags") && isa.empty()) {
      for (const char* flag : {"avx512f", "avx512_bf16", "avx512_vnni", "avx2", "fma", "amx_tile"}) {
        if ((" " + value() + " ").find(fmt::format(" {} ", flag)) != std::string::npos) {
          isa.insert(flag);
        }
      }
    }
  }
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return {{"cpu", model},
          {"isa", isa},
          {"cores", cores},
          {"description", fmt::format("{} ({}), {} cores", model, fmt::join(isa, " "), cores)}};
}

CompareSpec specFrom(const CompareOptions& o, const std::vector<std::string>& trainArgs) {
  CompareSpec spec;
  if (!o.specFile.empty()) {
    std::ifstream in(o.specFile);
    STRATA_CHECK(in.good(), "{}: cannot read the comparison spec", o.specFile);
    try {
      // A .yaml/.yml spec reads as the JSON document it spells: one schema, one set of checks.
      spec = compareSpecFromJson(isYamlPath(o.specFile) ? readYamlAsJson(o.specFile) : nlohmann::json::parse(in),
                                 o.specFile);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON: {}", o.specFile, e.what());
    }
  }
  spec.models.insert(spec.models.end(), o.models.begin(), o.models.end());
  spec.strategies.insert(spec.strategies.end(), o.strategies.begin(), o.strategies.end());
  spec.worldSizes.insert(spec.worldSizes.end(), o.worldSizes.begin(), o.worldSizes.end());
  spec.trainArgs.insert(spec.trainArgs.end(), trainArgs.begin(), trainArgs.end());
  // Absolute, so that --resume works from any directory.
  const auto absolute = [](std::string& model) {
    if (!model.empty()) {
      model = fs::absolute(model).lexically_normal().string();
    }
  };
  std::for_each(spec.models.begin(), spec.models.end(), absolute);
  for (CompareConfiguration& c : spec.configurations) {
    absolute(c.model);
  }
  return spec;
}

// 'a b' -> a b; "fsdp shard=full" -> 'fsdp shard=full': a command line a user can paste.
std::string shellQuoted(const std::vector<std::string>& args) {
  std::string line = "strata";
  for (const std::string& a : args) {
    const bool plain = !a.empty() && a.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                         "-_=.,/:+@%") == std::string::npos;
    std::string quoted = "'";
    for (const char c : a) {
      quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    }
    line += " " + (plain ? a : quoted + "'");
  }
  return line;
}

void printPlan(const ComparisonRunner& runner) {
  for (const CompareConfiguration& c : runner.configurations()) {
    fmt::print("{}:\n  {}\n", c.name, shellQuoted(trainArguments(c, runner.runDir(c), 29500)));
  }
}

void compare(const CompareOptions& o, const std::vector<std::string>& trainArgs) {
  CompareRunOptions run;
  run.predict = !o.noPredict;
  run.masterPort = o.masterPort;
  std::optional<ComparisonRunner> runner;
  if (!o.resume.empty()) {
    STRATA_CHECK(
        o.specFile.empty() && o.strategies.empty() && o.worldSizes.empty() && o.models.empty() && trainArgs.empty(),
        "--resume {} takes the comparison as it was started; give no spec, models, strategies, world "
        "sizes or train arguments with it",
        o.resume);
    runner.emplace(ComparisonRunner::resume(o.resume, run));
  } else {
    STRATA_CHECK(!o.out.empty() || o.dryRun, "strata compare needs --out DIR (or --resume DIR)");
    run.out = o.out;
    STRATA_CHECK(o.dryRun || !fs::exists(fs::path(o.out) / "comparison.json"),
                 "{} already holds a comparison: continue it with --resume {}, or choose another --out", o.out, o.out);
    runner.emplace(specFrom(o, trainArgs), run);
  }
  if (!o.dryRun && !o.reportOnly) {
    for (const CompareConfiguration& c : runner->configurations()) {
      STRATA_CHECK(c.model.empty() || fs::is_regular_file(c.model), "configuration {}: model '{}' not found", c.name,
                   c.model);
    }
  }
  const fs::path out = o.resume.empty() ? fs::path(o.out) : fs::path(o.resume);
  if (o.dryRun) {
    printPlan(*runner);
    return;
  }
  int failed = 0;
  if (!o.reportOnly) {
    fmt::print("comparing {} configuration(s) in {}\n", runner->configurations().size(), out.string());
    failed = runner->runAll();
  }
  writeComparisonReport(out, comparisonResults(*runner), describeHost());
  fmt::print("report: {} ({} and results.csv, results.json)\n", (out / "report.html").string(),
             (out / "report.md").string());
  if (failed > 0) {
    fmt::print("{} configuration(s) failed (see the report); rerun them with: strata compare --resume {}\n", failed,
               out.string());
  }
  STRATA_CHECK(failed == 0, "{} of {} configurations failed", failed, runner->configurations().size());
}

}  // namespace

void addCompareCommand(CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  CLI::App* c = app.add_subcommand(
      "compare",
      "run every configuration (models x strategies x world sizes) as a strata train run and write a report; "
      "arguments after -- go to every run (e.g. -- --data synthetic --epochs 2)");
  c->add_option("--model", o->models, ".onnx file to compare on (repeatable; default: the bundled CNN)");
  c->add_option("--strategy", o->strategies,
                "a strategy and its options, e.g. ddp, \"fsdp shard=full\", \"ps mode=async\" (repeatable)");
  c->add_option("--world-size", o->worldSizes, "ranks per run (repeatable)")->check(CLI::PositiveNumber);
  c->add_option("--spec", o->specFile, "comparison spec, JSON or YAML (.yaml, .yml; docs/compare.md); flags add to it");
  c->add_option("--out", o->out, "directory of the comparison: runs/, report.html, report.md, results.*");
  c->add_option("--resume", o->resume, "continue the comparison in DIR, rerunning what did not finish");
  c->add_flag("--no-predict", o->noPredict, "do not run strata plan before each configuration");
  c->add_flag("--dry-run", o->dryRun, "print each configuration's strata train command and run nothing");
  c->add_flag("--report-only", o->reportOnly, "write the report from the runs so far without running anything");
  c->add_option("--master-port", o->masterPort, "the port of each run's store (runs go one at a time)");
  c->add_option("train-args", o->trainArgs, "after --: arguments of every strata train run");
  c->callback([o] { compare(*o, o->trainArgs); });
}

}  // namespace strata::cli
