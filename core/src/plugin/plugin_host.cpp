#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <set>
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>

#include "strata/error.h"
#include "strata/plugin_host.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLibraryPrefix = "libstrata_plugin_";
constexpr const char* kLibrarySuffix = ".so";
constexpr const char* kInfoSymbol = "strata_strategy_info";
constexpr const char* kCreateSymbol = "strata_create_strategy";
constexpr const char* kDestroySymbol = "strata_destroy_strategy";

using InfoFn = const StrategyInfo*() noexcept;
using CreateFn = StrategyHandle*(char*, std::size_t) noexcept;
using DestroyFnType = void(StrategyHandle*) noexcept;

// Plugin names become file names, so they may not carry path separators or dots.
void checkName(const std::string& name) {
  const bool valid = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
  STRATA_CHECK(valid, "invalid strategy plugin name '{}': use letters, digits, '_' and '-' only", name);
}

// The plugin name a library file stands for, or "" when the file does not follow the naming scheme.
std::string nameFromFile(const fs::path& file) {
  const std::string base = file.filename().string();
  const std::string prefix = kLibraryPrefix;
  const std::string suffix = kLibrarySuffix;
  if (base.size() <= prefix.size() + suffix.size() || base.compare(0, prefix.size(), prefix) != 0 ||
      base.compare(base.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return {};
  }
  return base.substr(prefix.size(), base.size() - prefix.size() - suffix.size());
}

bool isRegularFile(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

std::string joinPaths(const std::vector<fs::path>& paths) {
  std::string out;
  for (const auto& path : paths) {
    out += out.empty() ? "" : ", ";
    out += path.string();
  }
  return out.empty() ? "(no directories)" : out;
}

// Opens a library. RTLD_NOW resolves every symbol the plugin uses from the host (the SDK's functions) at load time,
// so a plugin built against another Strata fails here with the missing symbol named, not in the middle of training.
std::unique_ptr<boost::dll::shared_library> openLibrary(const fs::path& file, bool resolveNow) {
  auto mode = boost::dll::load_mode::rtld_local;
  if (resolveNow) {
    mode = mode | boost::dll::load_mode::rtld_now;
  }
  try {
    return std::make_unique<boost::dll::shared_library>(file, mode);
  } catch (const std::exception& e) {
    fail("unable to load library {}: {}", file.string(), e.what());
  }
}

template <typename Fn>
Fn* resolve(const boost::dll::shared_library& library, const fs::path& file, const char* symbol) {
  if (!library.has(symbol)) {
    const char* reason = ::dlerror();
    fail(
        "unable to resolve symbol {} in library {}: {} (the file is not a Strata strategy plugin; plugins export "
        "their entry points with STRATA_EXPORT_STRATEGY)",
        symbol, file.string(), reason != nullptr ? reason : "symbol not exported");
  }
  return &library.get<Fn>(symbol);
}

// Note [ABI check first]: the info record's layout is frozen across ABI versions, so reading it is safe whatever
// SDK built the plugin; nothing else in the library is touched until its abiVersion matches ours.
PluginInfo readInfo(const boost::dll::shared_library& library, const fs::path& file) {
  const StrategyInfo* raw = resolve<InfoFn>(library, file, kInfoSymbol)();
  STRATA_CHECK(raw != nullptr, "unable to read plugin info from library {}: {} returned null", file.string(),
               kInfoSymbol);
  STRATA_CHECK(raw->abiVersion == kStrategyAbiVersion,
               "strategy ABI version mismatch in library {}: the plugin was built for ABI version {}, this Strata "
               "expects version {} (rebuild the plugin against this Strata's SDK)",
               file.string(), raw->abiVersion, kStrategyAbiVersion);
  auto text = [](const char* s) { return s != nullptr ? std::string(s) : std::string(); };
  return PluginInfo{text(raw->name), text(raw->version), text(raw->description), raw->abiVersion, file};
}

PluginInfo inspectLibrary(const boost::dll::shared_library& library, const fs::path& file) {
  PluginInfo info = readInfo(library, file);
  const std::string expected = nameFromFile(file);
  STRATA_CHECK(expected.empty() || info.name == expected,
               "library {} declares strategy plugin '{}', but its file name says '{}' (plugin '<name>' must be "
               "the file {}<name>{})",
               file.string(), info.name, expected, kLibraryPrefix, kLibrarySuffix);
  return info;
}

}  // namespace

std::string PluginHost::libraryFileName(const std::string& name) {
  return std::string(kLibraryPrefix) + name + kLibrarySuffix;
}

std::vector<fs::path> PluginHost::installDirectories() {
  std::error_code ec;
  const fs::path exe = boost::dll::program_location(ec);
  if (ec || exe.empty()) {
    return {};
  }
  const fs::path exeDir = exe.parent_path();
  return {(exeDir / ".." / "lib" / "strata" / "plugins").lexically_normal(),
          (exeDir / ".." / "plugins").lexically_normal()};
}

std::vector<fs::path> PluginHost::splitPath(const std::string& list) {
  std::vector<fs::path> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = std::min(list.find(':', start), list.size());
    if (end > start) {
      out.emplace_back(list.substr(start, end - start));
    }
    start = end + 1;
  }
  return out;
}

PluginHost::PluginHost(std::vector<fs::path> pluginDirs) : PluginHost(Tag{}, std::move(pluginDirs)) {
  if (const char* env = std::getenv("STRATA_PLUGIN_PATH"); env != nullptr) {
    for (auto& dir : splitPath(env)) {
      directories_.push_back(std::move(dir));
    }
  }
  for (auto& dir : installDirectories()) {
    directories_.push_back(std::move(dir));
  }
  // The same directory twice would only make error messages longer.
  std::vector<fs::path> unique;
  for (auto& dir : directories_) {
    if (std::find(unique.begin(), unique.end(), dir) == unique.end()) {
      unique.push_back(std::move(dir));
    }
  }
  directories_ = std::move(unique);
}

PluginHost::PluginHost(Tag, std::vector<fs::path> directories) : directories_(std::move(directories)) {}

PluginHost PluginHost::withDirectories(std::vector<fs::path> directories) {
  return PluginHost(Tag{}, std::move(directories));
}

fs::path PluginHost::find(const std::string& name) const {
  checkName(name);
  const std::string fileName = libraryFileName(name);
  std::vector<fs::path> looked;
  for (const auto& dir : directories_) {
    for (const fs::path& candidate : {dir / fileName, dir / name / fileName}) {
      if (isRegularFile(candidate)) {
        return candidate;
      }
      looked.push_back(candidate.parent_path());
    }
  }
  fail(
      "strategy plugin '{}' not found: no file {} in any of the directories searched: {} (add a directory with "
      "--plugin-dir or STRATA_PLUGIN_PATH)",
      name, fileName, joinPaths(looked));
}

PluginInfo PluginHost::inspect(const fs::path& file) const {
  // Listing only needs the info record, so symbols the plugin would resolve from the host may stay lazy.
  auto library = openLibrary(file, /*resolveNow=*/false);
  return inspectLibrary(*library, file);
}

std::vector<PluginInfo> PluginHost::list() const {
  std::vector<PluginInfo> out;
  std::set<std::string> seen;
  for (const auto& dir : directories_) {
    // Both layouts: <dir>/libstrata_plugin_<name>.so and <dir>/<name>/libstrata_plugin_<name>.so.
    std::map<std::string, fs::path> found;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path& path = it->path();
      if (const std::string name = nameFromFile(path); !name.empty() && isRegularFile(path)) {
        found.emplace(name, path);
      } else if (std::error_code dirEc; it->is_directory(dirEc)) {
        const fs::path nested = path / libraryFileName(path.filename().string());
        if (isRegularFile(nested)) {
          found.emplace(path.filename().string(), nested);
        }
      }
    }
    for (const auto& [name, file] : found) {
      if (seen.count(name) != 0) {
        continue;  // shadowed by a directory earlier in the search order
      }
      try {
        out.push_back(inspect(file));
        seen.insert(name);
      } catch (const Error& e) {
        spdlog::warn("skipping {}: {}", file.string(), e.what());
      }
    }
  }
  return out;
}

std::unique_ptr<LoadedStrategy> PluginHost::load(const std::string& name) const {
  const fs::path file = find(name);
  auto library = openLibrary(file, /*resolveNow=*/true);
  PluginInfo info = inspectLibrary(*library, file);
  CreateFn* create = resolve<CreateFn>(*library, file, kCreateSymbol);
  DestroyFnType* destroy = resolve<DestroyFnType>(*library, file, kDestroySymbol);

  std::array<char, 4096> message{};
  StrategyHandle* handle = create(message.data(), message.size());
  if (handle == nullptr) {
    message.back() = '\0';  // do not trust the plugin to terminate it
    fail("strategy plugin '{}' ({}) failed to create its strategy: {}", name, file.string(),
         message[0] != '\0' ? message.data() : "the factory returned null without a message");
  }
  return std::make_unique<LoadedStrategy>(std::move(info), std::move(library), handle, destroy);
}

}  // namespace strata
