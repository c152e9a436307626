// `strata role <name>`: one process of a role a strategy declares (the parameter server's servers), started by the
// launcher beside the ranks or by hand when another launcher (srun, torchrun) starts them.
#include "launch/role_command.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands/commands.h"
#include "common/strategy_options.h"
#include "launch/job_secret.h"
#include "launch/launcher.h"
#include "launch/role_process_context.h"
#include "strata/comm/tcp_store.h"
#include "strata/error.h"
#include "strata/plugin_host.h"
#include "strata/thread_pool.h"

namespace strata::cli {
namespace {

// --master-addr/--master-port when given, else MASTER_ADDR/MASTER_PORT, else the launcher's defaults.
void resolveMaster(RoleOptions& options) {
  if (options.masterAddr.empty()) {
    const char* addr = std::getenv("MASTER_ADDR");
    options.masterAddr = addr != nullptr && addr[0] != '\0' ? addr : "127.0.0.1";
  }
  if (options.masterPort == 0) {
    const char* text = std::getenv("MASTER_PORT");
    if (text == nullptr) {
      options.masterPort = 29500;
      return;
    }
    const std::string value(text);
    int port = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), port);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size() || port < 1 || port > 65535) {
      fail("environment variable MASTER_PORT='{}' is not a port number (1-65535)", value);
    }
    options.masterPort = port;
  }
}

// The declared count of role `name`; a clear error listing the declared roles when there is none.
int declaredCount(const LoadedStrategy& strategy, const StrategyRequirements& requirements, const std::string& name) {
  std::vector<std::string> declared;
  for (const RoleRequest& role : requirements.roles) {
    if (role.name == name) {
      return role.count;
    }
    declared.push_back(fmt::format("{} (x{})", role.name, role.count));
  }
  if (declared.empty()) {
    fail("strategy '{}' declares no role '{}' (it declares no roles)", strategy.info().name, name);
  }
  fail("strategy '{}' declares no role '{}'; its roles are {}", strategy.info().name, name, fmt::join(declared, ", "));
}

void runRole(RoleOptions options) {
  // stdout is often a pipe to the launcher: flush each line so it arrives as printed and survives a SIGTERM.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  resolveMaster(options);
  const std::map<std::string, std::string> strategyOptions = parseStrategyOptions(options.strategyOptions);
  const auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(options.timeoutS * 1000));
  // Declared before the strategy, so the strategy (which may hold the Store& it was given) is destroyed first.
  std::unique_ptr<TcpStore> store;
  const std::unique_ptr<LoadedStrategy> strategy =
      PluginHost({options.pluginDirs.begin(), options.pluginDirs.end()}).load(options.strategy);
  const StrategyRequirements requirements = strategy->requirements(
      StrategyQuery{.options = strategyOptions, .worldSize = options.workers, .nodes = options.nodes});
  const int count = declaredCount(*strategy, requirements, options.name);
  if (options.count != 0 && options.count != count) {
    fail("--count {} does not match the {} processes of role '{}' that strategy '{}' declares", options.count, count,
         options.name, options.strategy);
  }
  if (options.index >= count) {
    fail("--index {} is not below the {} processes of role '{}'", options.index, count, options.name);
  }
  // Note [role store client]: a plain client of rank 0's store (no rank, no rendezvous), so it never counts as a
  // rank and never disturbs the workers' rendezvous. It waits for the server with retries up to --timeout.
  store = std::make_unique<TcpStore>(TcpStoreOptions{.host = options.masterAddr,
                                                     .port = static_cast<std::uint16_t>(options.masterPort),
                                                     .isServer = false,
                                                     .timeout = timeout});
  // A role shares its node with the workers: one thread unless STRATA_THREADS says otherwise, so its OpenMP team
  // (the server's optimizer) never spins on the cores the workers compute on.
  const int threads = threadsFromEnvironment();
  ThreadPool::instance().setThreads(threads > 0 ? threads : 1);
  // Only now: until the role runs, SIGTERM's default action (exit at once) is the right one.
  RoleProcessContext::installStopHandlers();
  RoleProcessContext context(
      {.role = options.name,
       .index = options.index,
       .count = count,
       .workers = options.workers,
       .options = strategyOptions,
       .timeout = timeout,
       .hostAddress = options.hostAddress.empty() ? localAddressTowards(options.masterAddr, options.masterPort)
                                                  : options.hostAddress},
      *store);
  strategy->runRole(context);
}

}  // namespace

void runRoleProcess(const RoleOptions& options) {
  try {
    runRole(options);
  } catch (const std::exception& e) {
    fail("role {} {}: {}", options.name, options.index, e.what());
  }
}

std::vector<std::string> roleArguments(const RoleOptions& options) {
  std::vector<std::string> args{"role",       options.name,
                                "--index",    std::to_string(options.index),
                                "--count",    std::to_string(options.count),
                                "--workers",  std::to_string(options.workers),
                                "--nnodes",   std::to_string(options.nodes),
                                "--strategy", options.strategy};
  for (const std::string& pair : options.strategyOptions) {
    args.insert(args.end(), {"--strategy-opt", pair});
  }
  for (const std::string& dir : options.pluginDirs) {
    args.insert(args.end(), {"--plugin-dir", dir});
  }
  args.insert(args.end(), {"--timeout", fmt::format("{}", options.timeoutS)});
  if (!options.masterAddr.empty()) {
    args.insert(args.end(), {"--master-addr", options.masterAddr});
  }
  if (options.masterPort != 0) {
    args.insert(args.end(), {"--master-port", std::to_string(options.masterPort)});
  }
  if (!options.hostAddress.empty()) {
    args.insert(args.end(), {"--host-address", options.hostAddress});
  }
  return args;
}

namespace {

// The flags `role` and `ps-server` share.
void addRoleFlags(CLI::App* c, const std::shared_ptr<RoleOptions>& o) {
  c->add_option("--index", o->index, "this process's index within the role, 0 to count-1")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--count", o->count, "processes of this role (default: as the strategy declares)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--workers", o->workers, "worker ranks in the job (the world size)")
      ->required()
      ->check(CLI::PositiveNumber);
  c->add_option("--nnodes", o->nodes, "nodes in the job")->check(CLI::PositiveNumber);
  c->add_option("--strategy-opt", o->strategyOptions, "strategy option key=value (repeatable), as given to train");
  c->add_option("--plugin-dir", o->pluginDirs, "directory searched first for strategy plugins (repeatable)");
  c->add_option("--timeout", o->timeoutS, "seconds to wait for the store and for each request to it")
      ->check(CLI::PositiveNumber);
  c->add_option("--master-addr", o->masterAddr, "host of rank 0's store (default: MASTER_ADDR, else 127.0.0.1)");
  c->add_option("--master-port", o->masterPort, "port of rank 0's store (default: MASTER_PORT, else 29500)")
      ->check(CLI::Range(1, 65535));
  c->add_option("--host-address", o->hostAddress,
                "the address the ranks reach this process at (default: this host's address on the route to the "
                "master)");
  c->callback([o] { runRoleProcess(*o); });
}

}  // namespace

void addRoleCommand(CLI::App& app) {
  auto o = std::make_shared<RoleOptions>();
  CLI::App* c = app.add_subcommand("role", "run one process of a role a strategy declares (e.g. a parameter server)");
  c->footer(
      "`strata train` starts the roles its strategy declares by itself, on node rank 0, and under srun runs them in\n"
      "the first tasks. When another launcher starts the ranks (torchrun), start each role process by hand beside\n"
      "them, e.g.:\n"
      "  MASTER_ADDR=node01 MASTER_PORT=29500 strata role ps-server --index 0 --count 2 --workers 8 --strategy ps \\\n"
      "      --strategy-opt servers=2\n"
      "It connects to rank 0's store at MASTER_ADDR:MASTER_PORT (waiting up to --timeout for it), tells the ranks\n"
      "where it listens, and runs until the job is done (rank 0 says so in the store, or its store closes), SIGTERM\n"
      "or Ctrl-C.");
  c->add_option("name", o->name, "the role, as the strategy declares it")->required();
  c->add_option("--strategy", o->strategy, "the strategy plugin that declares the role")->required();
  addRoleFlags(c, o);

  // `strata ps-server` is `strata role ps-server --strategy ps`.
  auto ps = std::make_shared<RoleOptions>();
  ps->name = "ps-server";
  ps->strategy = "ps";
  CLI::App* server = app.add_subcommand("ps-server", "run one parameter server of a `--strategy ps` job by hand");
  server->footer(
      "The same as `strata role ps-server --strategy ps`. `strata train --strategy ps` starts its servers itself "
      "(under\n"
      "srun: the first S tasks); start them by hand when another launcher (torchrun) starts the workers, with the\n"
      "same --strategy-opt flags, MASTER_ADDR/MASTER_PORT of rank 0's store, and STRATA_JOB_SECRET_FILE or key_file=\n"
      "for the CURVE key.");
  addRoleFlags(server, ps);

  CLI::App* keygen = app.add_subcommand("ps-keygen", "write a new CURVE secret for --strategy-opt key_file=PATH");
  auto keyPath = std::make_shared<std::string>();
  keygen->add_option("path", *keyPath, "the file to create (mode 0600; an existing file is not overwritten)")
      ->required();
  keygen->callback([keyPath] { writeJobSecret(*keyPath); });
}

}  // namespace strata::cli
