#pragma once

// Finds and loads strategy plugins (shared libraries built against strata/sdk/strategy.h) with Boost.DLL.
//
// Naming scheme: the plugin `<name>` is the library file `libstrata_plugin_<name>.so`, found either directly in a
// search directory or in its subdirectory `<name>/` (the build tree's layout: build/plugins/<name>/).
//
// Search order (the first directory holding the file wins):
//   1. the directories given to the host (`--plugin-dir`, in the order given),
//   2. the colon-separated directories of the environment variable STRATA_PLUGIN_PATH,
//   3. the installation's folder, relative to the running binary: <exe dir>/../lib/strata/plugins, then the build
//      tree's <exe dir>/../plugins.

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "strata/sdk/strategy.h"

namespace boost::dll {
class shared_library;
}

namespace strata {

// What a plugin says about itself (copied out of the library, so it stays valid after the library unloads).
struct PluginInfo {
  std::string name;
  std::string version;
  std::string description;
  int abiVersion = 0;
  std::filesystem::path file;
};

// A strategy created by a plugin, together with the library that holds its code. The strategy is destroyed by the
// plugin's own strata_destroy_strategy before the library is unloaded. The hook methods turn the messages returned
// at the library boundary back into strata::Error.
class LoadedStrategy {
 public:
  using DestroyFn = void (*)(StrategyHandle*) noexcept;

  LoadedStrategy(PluginInfo info, std::unique_ptr<boost::dll::shared_library> library, StrategyHandle* handle,
                 DestroyFn destroy);
  ~LoadedStrategy();
  LoadedStrategy(const LoadedStrategy&) = delete;
  LoadedStrategy& operator=(const LoadedStrategy&) = delete;

  const PluginInfo& info() const { return info_; }
  StrategyHandle& handle() { return *handle_; }

  StrategyRequirements requirements(const StrategyQuery& query);
  void setup(StrategyContext& context);
  std::int64_t rejoin(StrategyContext& context);
  void beforeForward(const StepInfo& at);
  void afterBackward(const StepInfo& at);
  void step(const StepInfo& at, double lr);
  void beforeEvaluate();
  void afterEvaluate();
  void afterEpoch(const StepInfo& at);
  void saveState(StrategyContext& context, StateWriter& writer);
  void loadState(StrategyContext& context, StateReader& reader);
  void teardown();
  void runRole(RoleContext& context);

 private:
  void check(const char* hook, const std::string& message) const;

  PluginInfo info_;
  std::unique_ptr<boost::dll::shared_library> library_;
  StrategyHandle* handle_;
  DestroyFn destroy_;
};

class PluginHost {
 public:
  // The library file name of plugin `name`: libstrata_plugin_<name>.so.
  static std::string libraryFileName(const std::string& name);
  // <exe dir>/../lib/strata/plugins and <exe dir>/../plugins for the running binary.
  static std::vector<std::filesystem::path> installDirectories();
  // The directories of a colon-separated list such as STRATA_PLUGIN_PATH (empty entries are skipped).
  static std::vector<std::filesystem::path> splitPath(const std::string& list);

  // Searches `pluginDirs`, then STRATA_PLUGIN_PATH (read now), then the installation's directories.
  explicit PluginHost(std::vector<std::filesystem::path> pluginDirs = {});
  // Explicit directories only (tests): no environment, no installation folder.
  static PluginHost withDirectories(std::vector<std::filesystem::path> directories);

  const std::vector<std::filesystem::path>& searchDirectories() const { return directories_; }

  // Every plugin found, one per name (the one load() would pick), in search order. Files that follow the naming
  // scheme but are not loadable Strata plugins are skipped with a warning.
  std::vector<PluginInfo> list() const;
  // The file load(name) would open; throws Error naming every directory searched when there is none.
  std::filesystem::path find(const std::string& name) const;
  // Reads the info record of a library file, checking that it is a Strata plugin with this SDK's ABI.
  PluginInfo inspect(const std::filesystem::path& file) const;
  // Loads plugin `name` and creates its strategy.
  std::unique_ptr<LoadedStrategy> load(const std::string& name) const;

 private:
  struct Tag {};
  PluginHost(Tag, std::vector<std::filesystem::path> directories);

  std::vector<std::filesystem::path> directories_;
};

}  // namespace strata
