#include "strata/plugin_host.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>

#include "strata/error.h"
#include "strata/optim/run_optimizers.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

const fs::path kBuildPlugins = STRATA_BUILD_PLUGIN_DIR;
const fs::path kTestPlugins = STRATA_TEST_PLUGIN_DIR;

// Runs `fn`, expecting a strata::Error, and returns its message.
template <typename Fn>
std::string errorOf(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected strata::Error";
  return {};
}

// Hooks of a plan with no nodes: a strategy that installs node hooks here never sees them fire.
class NoHooks final : public Hooks {
 public:
  HookHandle beforeNode(NodeCallback /*callback*/) override {
    return HookHandle([] {});
  }
  HookHandle afterNode(NodeCallback /*callback*/) override {
    return HookHandle([] {});
  }
  HookHandle gradientReady(GradientCallback /*callback*/) override {
    return HookHandle([] {});
  }
  std::size_t nodeCount() const override { return 0; }
  NodeInfo node(std::size_t index) const override { fail("NoHooks has no node {}", index); }
};

// A context with one float parameter vector and a real SGD optimizer; no plan, no process group.
class FakeContext final : public StrategyContext {
 public:
  using Options = std::map<std::string, std::string>;
  explicit FakeContext(Options options)
      : store_(makeStore()), optimizers_(store_, OptimizerOptions{}), options_(std::move(options)) {}

  int rank() const override { return 0; }
  int worldSize() const override { return 1; }
  int localRank() const override { return 0; }
  int nodes() const override { return 1; }
  ParameterStore& parameters() override { return store_; }
  std::vector<Tensor> buffers() override { return {}; }
  Hooks& hooks() override { return hooks_; }
  RunOptimizers& optimizers() override { return optimizers_; }
  ProcessGroup* processGroup() override { return nullptr; }
  Store* store() override { return nullptr; }
  const std::map<std::string, std::string>& options() const override { return options_; }
  int gradAccumulation() const override { return 1; }
  std::chrono::milliseconds timeout() const override { return std::chrono::seconds(10); }
  void addFigure(const std::string& /*key*/, double /*value*/) override {}

 private:
  static ParameterStore makeStore() {
    ParameterStore store({{"w", Tensor::zeros(DType::Float32, {2})}});
    store.gradient(0).data<float>()[0] = 1.0f;
    store.gradient(0).data<float>()[1] = -2.0f;
    return store;
  }

  ParameterStore store_;
  NoHooks hooks_;
  RunOptimizers optimizers_;
  std::map<std::string, std::string> options_;
};

// Sets or clears STRATA_PLUGIN_PATH for one test and restores it afterwards.
class ScopedPluginPath {
 public:
  explicit ScopedPluginPath(const char* value) {
    if (const char* old = std::getenv("STRATA_PLUGIN_PATH"); old != nullptr) {
      old_ = old;
    }
    set(value);
  }
  ~ScopedPluginPath() { set(old_ ? old_->c_str() : nullptr); }

 private:
  static void set(const char* value) {
    if (value != nullptr) {
      ::setenv("STRATA_PLUGIN_PATH", value, 1);
    } else {
      ::unsetenv("STRATA_PLUGIN_PATH");
    }
  }
  std::optional<std::string> old_;
};

TEST(PluginHostTest, LibraryFileNameFollowsTheNamingScheme) {
  EXPECT_EQ(PluginHost::libraryFileName("ddp"), "libstrata_plugin_ddp.so");
  EXPECT_EQ(PluginHost::splitPath(":a::b/c:"), (std::vector<fs::path>{"a", "b/c"}));
}

TEST(PluginHostTest, SinglePluginLoadsReportsItsInfoAndSteps) {
  const PluginHost host = PluginHost::withDirectories({kBuildPlugins});
  const auto plugins = host.list();
  const auto single = std::find_if(plugins.begin(), plugins.end(), [](const auto& p) { return p.name == "single"; });
  ASSERT_NE(single, plugins.end());
  EXPECT_EQ(single->version, "0.1.0");
  EXPECT_EQ(single->abiVersion, kStrategyAbiVersion);
  EXPECT_FALSE(single->description.empty());
  EXPECT_EQ(single->file, kBuildPlugins / "single" / "libstrata_plugin_single.so");

  auto strategy = host.load("single");
  ASSERT_NE(strategy, nullptr);
  EXPECT_EQ(strategy->info().name, "single");
  FakeContext context(FakeContext::Options{});
  strategy->setup(context);
  const StepInfo at{0, 0, 1};
  strategy->beforeForward(at);
  strategy->afterBackward(at);
  strategy->step(at, 0.5);  // plain SGD: w -= 0.5 * g
  EXPECT_FLOAT_EQ(context.parameters().parameter(0).data<float>()[0], -0.5f);
  EXPECT_FLOAT_EQ(context.parameters().parameter(0).data<float>()[1], 1.0f);
  EXPECT_EQ(context.optimizers().full().steps(), 1);
  strategy->teardown();
  strategy.reset();  // strata_destroy_strategy, then the library unloads
}

TEST(PluginHostTest, SinglePluginRejectsUnknownOptions) {
  auto strategy = PluginHost::withDirectories({kBuildPlugins}).load("single");
  FakeContext context(FakeContext::Options{{"bucket_mb", "25"}});
  const std::string message = errorOf([&] { strategy->setup(context); });
  EXPECT_NE(message.find("'single'"), std::string::npos) << message;
  EXPECT_NE(message.find("'bucket_mb'"), std::string::npos) << message;
  EXPECT_NE(message.find("setup"), std::string::npos) << message;
}

TEST(PluginHostTest, NotFoundNamesThePluginAndEveryDirectorySearched) {
  const PluginHost host = PluginHost::withDirectories({"/nonexistent/one", "/nonexistent/two"});
  const std::string message = errorOf([&] { host.load("zero"); });
  EXPECT_NE(message.find("strategy plugin 'zero' not found"), std::string::npos) << message;
  EXPECT_NE(message.find("libstrata_plugin_zero.so"), std::string::npos) << message;
  for (const char* dir : {"/nonexistent/one", "/nonexistent/one/zero", "/nonexistent/two", "/nonexistent/two/zero"}) {
    EXPECT_NE(message.find(dir), std::string::npos) << dir << " missing in: " << message;
  }
}

TEST(PluginHostTest, RejectsNamesThatAreNotFileNames) {
  const std::string message = errorOf([] { PluginHost::withDirectories({kBuildPlugins}).load("../single"); });
  EXPECT_NE(message.find("invalid strategy plugin name '../single'"), std::string::npos) << message;
}

TEST(PluginHostTest, FileWithoutEntryPointsIsNotAPlugin) {
  const std::string message = errorOf([] { PluginHost::withDirectories({kTestPlugins}).load("not_a_plugin"); });
  const fs::path file = kTestPlugins / "not_a_plugin" / "libstrata_plugin_not_a_plugin.so";
  EXPECT_NE(message.find("unable to resolve symbol strata_strategy_info in library " + file.string()),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("not a Strata strategy plugin"), std::string::npos) << message;
}

TEST(PluginHostTest, AbiMismatchIsReportedBeforeAnythingElseIsCalled) {
  // The wrong_abi plugin's factory aborts: reaching it would crash this test.
  const std::string message = errorOf([] { PluginHost::withDirectories({kTestPlugins}).load("wrong_abi"); });
  const fs::path file = kTestPlugins / "wrong_abi" / "libstrata_plugin_wrong_abi.so";
  EXPECT_NE(message.find("strategy ABI version mismatch in library " + file.string()), std::string::npos) << message;
  EXPECT_NE(message.find("built for ABI version " + std::to_string(kStrategyAbiVersion + 41)), std::string::npos)
      << message;
  EXPECT_NE(message.find("expects version " + std::to_string(kStrategyAbiVersion)), std::string::npos) << message;
}

TEST(PluginHostTest, FactoryFailureCarriesThePluginsMessage) {
  const std::string message = errorOf([] { PluginHost::withDirectories({kTestPlugins}).load("failing"); });
  EXPECT_NE(message.find("strategy plugin 'failing'"), std::string::npos) << message;
  EXPECT_NE(message.find("failed to create its strategy"), std::string::npos) << message;
  EXPECT_NE(message.find("no accelerator named 'quantum0' is attached"), std::string::npos) << message;
}

TEST(PluginHostTest, ListSkipsFilesThatAreNotLoadablePlugins) {
  std::vector<std::string> names;
  for (const PluginInfo& plugin : PluginHost::withDirectories({kTestPlugins}).list()) {
    names.push_back(plugin.name);
  }
  std::sort(names.begin(), names.end());
  // not_a_plugin and wrong_abi are skipped with a warning; outside_sdk is never built.
  EXPECT_EQ(names, (std::vector<std::string>{"echo_role", "failing"}));
}

TEST(PluginHostTest, SearchOrderIsPluginDirThenEnvironmentThenInstallation) {
  const fs::path root = fs::temp_directory_path() / ("strata_plugin_search_" + std::to_string(::getpid()));
  const fs::path flagDir = root / "flag";
  const fs::path envDir = root / "env";
  fs::create_directories(flagDir);
  fs::create_directories(envDir / "single");  // the build tree's <dir>/<name>/ layout works in any directory
  const fs::path built = kBuildPlugins / "single" / "libstrata_plugin_single.so";
  fs::copy_file(built, flagDir / "libstrata_plugin_single.so", fs::copy_options::overwrite_existing);
  fs::copy_file(built, envDir / "single" / "libstrata_plugin_single.so", fs::copy_options::overwrite_existing);

  {
    ScopedPluginPath env(("/nonexistent:" + envDir.string()).c_str());
    const PluginHost host({flagDir});
    ASSERT_GE(host.searchDirectories().size(), 3u);
    EXPECT_EQ(host.searchDirectories()[0], flagDir);
    EXPECT_EQ(host.searchDirectories()[1], "/nonexistent");
    EXPECT_EQ(host.searchDirectories()[2], envDir);
    EXPECT_EQ(host.find("single"), flagDir / "libstrata_plugin_single.so");
    const auto plugins = host.list();
    ASSERT_FALSE(plugins.empty());
    EXPECT_EQ(plugins[0].file, flagDir / "libstrata_plugin_single.so");  // shadows the others
    EXPECT_EQ(host.load("single")->info().file, flagDir / "libstrata_plugin_single.so");

    EXPECT_EQ(PluginHost().find("single"), envDir / "single" / "libstrata_plugin_single.so");
  }
  {
    // Neither flag nor environment: the folder next to this binary (build/tests/../plugins/single/).
    ScopedPluginPath env(nullptr);
    const fs::path found = PluginHost().find("single");
    EXPECT_EQ(fs::canonical(found), fs::canonical(built));
  }
  fs::remove_all(root);
}

// Run by the ctest plugin_local_sgd_out_of_tree with the directory of an out-of-tree build of examples/local_sgd.
TEST(PluginHostTest, OutOfTreeLocalSgdPluginLoads) {
  const char* dir = std::getenv("STRATA_TEST_LOCAL_SGD_DIR");
  if (dir == nullptr) {
    GTEST_SKIP() << "STRATA_TEST_LOCAL_SGD_DIR is not set (the ctest plugin_local_sgd_out_of_tree sets it)";
  }
  const PluginHost host({fs::path(dir)});
  auto strategy = host.load("local_sgd");
  EXPECT_EQ(strategy->info().name, "local_sgd");
  EXPECT_EQ(strategy->info().abiVersion, kStrategyAbiVersion);

  FakeContext context(FakeContext::Options{{"k", "4"}});
  strategy->setup(context);
  strategy->step(StepInfo{}, 1.0);  // no process group: a plain local step
  EXPECT_FLOAT_EQ(context.parameters().parameter(0).data<float>()[0], -1.0f);

  auto other = host.load("local_sgd");
  FakeContext misspelt(FakeContext::Options{{"kk", "4"}});
  const std::string message = errorOf([&] { other->setup(misspelt); });
  EXPECT_NE(message.find("'kk'"), std::string::npos) << message;
  EXPECT_NE(message.find("'local_sgd'"), std::string::npos) << message;

  auto third = host.load("local_sgd");
  FakeContext zero(FakeContext::Options{{"k", "0"}});
  EXPECT_NE(errorOf([&] { third->setup(zero); }).find("k"), std::string::npos);
}

}  // namespace
}  // namespace strata
