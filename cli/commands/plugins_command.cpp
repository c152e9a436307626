#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands/commands.h"
#include "strata/plugin_host.h"

namespace strata::cli {
namespace {

struct PluginsOptions {
  std::vector<std::string> pluginDirs;
};

void listPlugins(const PluginsOptions& options) {
  const PluginHost host(std::vector<std::filesystem::path>(options.pluginDirs.begin(), options.pluginDirs.end()));
  const std::vector<PluginInfo> plugins = host.list();
  if (plugins.empty()) {
    std::string searched;
    for (const auto& dir : host.searchDirectories()) {
      searched += fmt::format("\n  {}", dir.string());
    }
    fmt::print("no strategy plugins found; searched:{}\n", searched.empty() ? " (no directories)" : searched);
    return;
  }
  // Column widths from the content, so long names or versions do not break the table.
  std::size_t nameWidth = 4;
  std::size_t versionWidth = 7;
  std::size_t descriptionWidth = 11;
  for (const auto& plugin : plugins) {
    nameWidth = std::max(nameWidth, plugin.name.size());
    versionWidth = std::max(versionWidth, plugin.version.size());
    descriptionWidth = std::max(descriptionWidth, plugin.description.size());
  }
  fmt::print("{:<{}}  {:<{}}  {:<3}  {:<{}}  {}\n", "NAME", nameWidth, "VERSION", versionWidth, "ABI", "DESCRIPTION",
             descriptionWidth, "FILE");
  for (const auto& plugin : plugins) {
    fmt::print("{:<{}}  {:<{}}  {:<3}  {:<{}}  {}\n", plugin.name, nameWidth, plugin.version, versionWidth,
               plugin.abiVersion, plugin.description, descriptionWidth, plugin.file.string());
  }
}

}  // namespace

void addPluginsCommand(CLI::App& app) {
  auto options = std::make_shared<PluginsOptions>();
  CLI::App* command = app.add_subcommand(
      "plugins", "list the strategy plugins found (--plugin-dir, then STRATA_PLUGIN_PATH, then the installation)");
  command->add_option("--plugin-dir", options->pluginDirs, "a directory searched first for plugins (repeatable)");
  command->callback([options] { listPlugins(*options); });
}

}  // namespace strata::cli
