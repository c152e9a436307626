#pragma once

#include <CLI/CLI.hpp>

namespace strata::cli {

// Each command adds its subcommand and options to the app; the callback runs it.
void addCompareCommand(CLI::App& app);
void addGenerateCommand(CLI::App& app);
void addInspectCommand(CLI::App& app);
void addPlanCommand(CLI::App& app);
void addPluginsCommand(CLI::App& app);
void addRoleCommand(CLI::App& app);
void addRunCommand(CLI::App& app);
void addStepCommand(CLI::App& app);
void addTrainCommand(CLI::App& app);

}  // namespace strata::cli
