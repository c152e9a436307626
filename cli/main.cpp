#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "commands/commands.h"
#include "strata/error.h"

int main(int argc, char** argv) {
  // Errors and warnings go to stderr, so stdout stays clean for results.
  spdlog::set_default_logger(spdlog::stderr_color_mt("strata"));
  spdlog::set_pattern("%^%l%$: %v");
  CLI::App app{"Strata: train ONNX models with pluggable distributed strategies"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "strata 0.1.0");
  strata::cli::addCompareCommand(app);
  strata::cli::addInspectCommand(app);
  strata::cli::addPlanCommand(app);
  strata::cli::addPluginsCommand(app);
  strata::cli::addRoleCommand(app);
  strata::cli::addRunCommand(app);
  strata::cli::addStepCommand(app);
  strata::cli::addTrainCommand(app);
  strata::cli::addGenerateCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const strata::Error& e) {
    spdlog::error("{}", e.what());
    return 1;
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", e.what());
    return 2;
  }
  return 0;
}
