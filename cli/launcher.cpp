#include "launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "job_secret.h"
#include "node_hosts.h"
#include "role_command.h"
#include "strata/comm/tcp_store.h"
#include "strata/error.h"

extern char** environ;

namespace strata::cli {
namespace detail {

using Clock = std::chrono::steady_clock;

// How long a rank or role may take to exit after SIGTERM before it gets SIGKILL.
constexpr auto kGracePeriod = std::chrono::seconds(5);
// Longest line kept whole; a longer run of bytes without a newline is passed on in pieces.
constexpr std::size_t kMaxLine = 1 << 20;

std::optional<std::string> environmentValue(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::nullopt : std::optional<std::string>(value);
}

// A whole decimal integer in [low, high]; anything else names the variable and its value.
int parseInteger(const char* name, const std::string& value, int low, const char* what) {
  int result = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, result);
  if (value.empty() || ec != std::errc() || ptr != end || result < low) {
    fail("environment variable {}='{}' is not {}", name, value, what);
  }
  return result;
}

int nonNegative(const char* name, const std::string& value) {
  return parseInteger(name, value, 0, "a non-negative integer");
}

int positive(const char* name, const std::string& value) {
  return parseInteger(name, value, 1, "a positive integer");
}

int port(const char* name, const std::string& value) {
  const int result = parseInteger(name, value, 1, "a port number (1-65535)");
  if (result > 65535) {
    fail("environment variable {}='{}' is not a port number (1-65535)", name, value);
  }
  return result;
}

// The most tasks or hosts Strata expands from Slurm's compressed lists; more is a malformed variable.
constexpr std::size_t kMaxSlurmList = 1 << 20;

// Slurm's compressed per-node task counts, e.g. "2(x3),1" -> 2, 2, 2, 1.
std::vector<int> taskCounts(const char* name, const std::string& value) {
  std::vector<int> counts;
  std::size_t at = 0;
  while (at <= value.size()) {
    const std::size_t comma = std::min(value.find(',', at), value.size());
    const std::string item = value.substr(at, comma - at);
    const std::size_t paren = item.find("(x");
    const int tasks = positive(name, paren == std::string::npos ? item : item.substr(0, paren));
    int repeat = 1;
    if (paren != std::string::npos) {
      if (item.back() != ')') {
        fail("environment variable {}='{}' is not a Slurm task count list like 2(x3),1", name, value);
      }
      repeat = positive(name, item.substr(paren + 2, item.size() - paren - 3));
    }
    if (counts.size() + static_cast<std::size_t>(repeat) > kMaxSlurmList) {
      fail("environment variable {}='{}' lists more than {} nodes", name, value, kMaxSlurmList);
    }
    counts.insert(counts.end(), static_cast<std::size_t>(repeat), tasks);
    at = comma + 1;
  }
  return counts;
}

// Tasks on node `nodeId` from Slurm's compressed per-node counts.
int tasksOnNode(const char* name, const std::string& value, int nodeId) {
  const std::vector<int> counts = taskCounts(name, value);
  if (nodeId >= static_cast<int>(counts.size())) {
    fail("environment variable {}='{}' lists no tasks for node {}", name, value, nodeId);
  }
  return counts[static_cast<std::size_t>(nodeId)];
}

// The first host of a Slurm node list: "gpu[03-06,9],cpu1" -> "gpu03".
std::string firstHost(const std::string& nodeList) {
  const std::size_t bracket = nodeList.find('[');
  const std::size_t comma = nodeList.find(',');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket)) {
    return nodeList.substr(0, comma);
  }
  const std::size_t stop = nodeList.find_first_of(",-]", bracket + 1);
  return nodeList.substr(0, bracket) + nodeList.substr(bracket + 1, stop - bracket - 1);
}

// One name of a host list with its bracket groups expanded: "n[1-2]-ib[01,03]" -> n1-ib01, n1-ib03, n2-ib01, ...
void expandHostName(const std::string& list, const std::string& name, std::vector<std::string>& out) {
  const std::size_t open = name.find('[');
  if (open == std::string::npos) {
    out.push_back(name);
    return;
  }
  const std::size_t close = name.find(']', open);
  if (close == std::string::npos) {
    fail("Slurm node list '{}': '[' without ']' in '{}'", list, name);
  }
  std::vector<std::string> rests;
  expandHostName(list, name.substr(close + 1), rests);
  const std::string ranges = name.substr(open + 1, close - open - 1);
  std::size_t at = 0;
  while (at <= ranges.size()) {
    const std::size_t comma = std::min(ranges.find(',', at), ranges.size());
    const std::string range = ranges.substr(at, comma - at);
    const std::size_t dash = range.find('-');
    const std::string low = range.substr(0, dash);
    const std::string high = dash == std::string::npos ? low : range.substr(dash + 1);
    const auto number = [&](const std::string& text) {
      int value = 0;
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || value < 0) {
        fail("Slurm node list '{}': '{}' is not a range of host numbers like 03-06", list, range);
      }
      return value;
    };
    const int first = number(low);
    const int last = number(high);
    if (last < first || out.size() + static_cast<std::size_t>(last - first + 1) * rests.size() > kMaxSlurmList) {
      fail("Slurm node list '{}': the range '{}' is empty or too large", list, range);
    }
    for (int n = first; n <= last; ++n) {
      // Slurm pads every number to the width of the range's lower bound: [08-10] -> 08, 09, 10.
      const std::string digits = fmt::format("{:0{}}", n, low.size());
      for (const std::string& rest : rests) {
        out.push_back(name.substr(0, open) + digits + rest);
      }
    }
    at = comma + 1;
  }
}

// Every host of a Slurm node list, in order: "gpu[03-04,9],cpu1" -> gpu03, gpu04, gpu9, cpu1.
std::vector<std::string> expandHostList(const std::string& list) {
  std::vector<std::string> hosts;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size() && list[i] == '[') {
      ++depth;
    } else if (i < list.size() && list[i] == ']') {
      --depth;
    } else if (i == list.size() || (list[i] == ',' && depth == 0)) {
      if (i > start) {
        expandHostName(list, list.substr(start, i - start), hosts);
      }
      start = i + 1;
    }
  }
  return hosts;
}

// Note [Slurm roles]: the node of every task of the step, from the tasks per node and srun's distribution across
// nodes (block, the default, or cyclic); nullopt for another distribution (plane, arbitrary), whose layout the
// environment does not describe.
std::optional<std::vector<int>> taskNodes(const std::vector<int>& counts, const std::string& distribution) {
  const std::string across = distribution.substr(0, distribution.find(':'));
  std::vector<int> nodes;
  if (across.empty() || across == "block" || across == "*") {
    for (std::size_t n = 0; n < counts.size(); ++n) {
      nodes.insert(nodes.end(), static_cast<std::size_t>(counts[n]), static_cast<int>(n));
    }
    return nodes;
  }
  if (across == "cyclic" || across == "fcyclic") {
    std::vector<int> left = counts;
    for (bool any = true; any;) {
      any = false;
      for (std::size_t n = 0; n < left.size(); ++n) {
        if (left[n] > 0) {
          --left[n];
          nodes.push_back(static_cast<int>(n));
          any = true;
        }
      }
    }
    return nodes;
  }
  return std::nullopt;
}

std::string describeStatus(int status) {
  if (WIFEXITED(status)) {
    return fmt::format("exited with status {}", WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    const char* name = sigabbrev_np(signal);
    return name != nullptr ? fmt::format("was killed by signal {} (SIG{})", signal, name)
                           : fmt::format("was killed by signal {}", signal);
  }
  return fmt::format("ended with wait status {}", status);
}

// This process's own argv, to repeat for each rank.
std::vector<std::string> ownCommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = std::min(text.find('\0', at), text.size());
    args.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  if (args.empty()) {
    fail("cannot read this process's command line from /proc/self/cmdline");
  }
  return args;
}

int availableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    return std::max(1, CPU_COUNT(&set));
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

void writeAll(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return;  // the reader went away; nothing sensible left to do with the line
    }
    done += static_cast<std::size_t>(n);
  }
}

// One child's stdout or stderr, passed on line by line with the child's prefix.
struct Stream {
  int fd = -1;
  int target = STDOUT_FILENO;
  std::string pending;
};

// A rank or a role process.
struct Child {
  std::string label;  // "rank 3" or "echo-server 1": the output prefix, and the name in messages
  bool role = false;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  Stream out;
  Stream err;
  // For restarting a role that may be restarted (RoleRequest::maxRestarts).
  std::vector<std::string> args;
  std::vector<std::string> env;
  int restartsLeft = 0;
  int restarts = 0;
  int rank = -1;  // a rank's global rank
};

// A child as messages name it: "rank 3" or "role echo-server 1".
std::string describe(const Child& child) {
  return child.role ? "role " + child.label : child.label;
}

// Role names become command-line words and output prefixes; a strategy declaring something else is refused here,
// before any process starts.
void checkRoles(const RoleLaunch& launch) {
  for (const RoleRequest& role : launch.roles) {
    const bool word = !role.name.empty() && role.name.front() != '-' &&
                      std::all_of(role.name.begin(), role.name.end(),
                                  [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
    if (!word || role.count < 0) {
      fail(
          "strategy '{}' declares role '{}' with count {}: a role is a lower-case word (a-z, 0-9, '-') with a "
          "count of 0 or more",
          launch.strategy, role.name, role.count);
    }
  }
}

// Starts the local ranks, and the role processes on node rank 0, and supervises them until all have exited.
class RankLauncher {
 public:
  RankLauncher(const LaunchOptions& options, const RoleLaunch& roles, std::vector<std::string> args)
      : options_(options), roles_(roles), args_(std::move(args)) {
    std::size_t processes = static_cast<std::size_t>(options_.nproc);
    for (const RoleRequest& role : roles_.roles) {
      processes += static_cast<std::size_t>(role.count);
    }
    children_.reserve(processes);  // Stream pointers must stay valid
  }

  ~RankLauncher() {
    // Only reached with children still running when start() failed half-way; never leave them behind.
    for (Child& child : children_) {
      if (child.running) {
        ::kill(child.pid, SIGKILL);
        ::waitpid(child.pid, nullptr, 0);
      }
      closeStream(child.out);
      closeStream(child.err);
    }
    if (signalFd_ >= 0) {
      ::close(signalFd_);
      pthread_sigmask(SIG_SETMASK, &oldMask_, nullptr);
    }
  }

  RankLauncher(const RankLauncher&) = delete;
  RankLauncher& operator=(const RankLauncher&) = delete;

  int run() {
    blockSignals();
    for (int local = 0; local < options_.nproc; ++local) {
      startRank(local);
    }
    // Roles start after the ranks: they connect to rank 0's store with retries, so the order is not a race. Roles
    // placed by host name start once every node's launcher has published its name (Note [Placing roles by host]).
    const bool byHost = std::any_of(roles_.roles.begin(), roles_.roles.end(),
                                    [](const RoleRequest& role) { return !role.hosts.empty() && role.count > 0; });
    if (byHost) {
      nodeHosts_ = std::make_unique<NodeHosts>(
          NodeHosts::Options{.masterAddr = options_.masterAddr,
                             .masterPort = options_.masterPort,
                             .nodes = options_.nnodes,
                             .nodeRank = options_.nodeRank,
                             .hostName = publishedHostName(),
                             .timeout = std::chrono::milliseconds(static_cast<std::int64_t>(roles_.timeoutS * 1000))});
    } else {
      startRoles({});
    }
    supervise();
    nodeHosts_.reset();
    for (Child& child : children_) {
      drain(child.out);
      drain(child.err);
    }
    std::fflush(stdout);
    if (interruptedBy_ != 0) {
      spdlog::error("interrupted by SIG{}; stopped the ranks{}", sigabbrev_np(interruptedBy_),
                    hasRoles() ? " and the roles" : "");
      spdlog::default_logger()->flush();
      // Die by the same signal so a calling shell or scheduler sees the interruption.
      ::close(signalFd_);
      signalFd_ = -1;
      ::signal(interruptedBy_, SIG_DFL);
      pthread_sigmask(SIG_SETMASK, &oldMask_, nullptr);
      ::raise(interruptedBy_);
    }
    if (failed_ != nullptr) {
      fail("{} {}{}{}", describe(*failed_), describeStatus(failed_->status),
           failed_->role ? " before the workers finished" : "", stoppedOthers(*failed_));
    }
    if (!launcherError_.empty()) {
      fail("{}; stopped the ranks{}", launcherError_, hasRoles() ? " and the roles" : "");
    }
    return 0;
  }

 private:
  // Note [launcher signals]: SIGINT, SIGTERM and SIGCHLD are blocked in this thread and read from a signalfd in
  // the poll loop, so forwarding and reaping happen in ordinary code instead of handlers. They are blocked before
  // the first fork so an early exit of a rank is not missed, and each child restores the old mask before exec.
  // SIGCHLD is set to SIG_DFL: an inherited SIG_IGN would make the kernel reap the ranks and hide their status.
  // Threads started before this point (none in `strata train` today) would still take SIGINT with its default
  // action; the ranks then get SIGTERM from PR_SET_PDEATHSIG, so nothing is orphaned either way.
  void blockSignals() {
    ::signal(SIGCHLD, SIG_DFL);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &mask, &oldMask_);
    signalFd_ = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (signalFd_ < 0) {
      const int error = errno;
      pthread_sigmask(SIG_SETMASK, &oldMask_, nullptr);
      fail("cannot create a signalfd for the rank launcher: {}", std::strerror(error));
    }
  }

  bool hasRoles() const { return children_.size() > rankCount(); }
  // The job is being stopped: by a failure, an interruption or the launcher's own error.
  bool stopping() const { return failed_ != nullptr || interruptedBy_ != 0 || !launcherError_.empty(); }

  // Starts the role processes placed on this node: by node rank, or by host name (`nodeHosts`: every node's, by
  // node rank). Every placement is checked before any process starts.
  void startRoles(const std::vector<std::string>& nodeHosts) {
    std::vector<std::pair<const RoleRequest*, int>> here;
    for (const RoleRequest& role : roles_.roles) {
      const std::vector<int> byHost = role.hosts.empty() ? std::vector<int>{} : placeByHost(role, nodeHosts);
      for (int index = 0; index < role.count; ++index) {
        const int node = role.hosts.empty() ? role.nodeOf(index) : byHost.at(static_cast<std::size_t>(index));
        if (node == options_.nodeRank) {
          here.emplace_back(&role, index);
        }
      }
    }
    for (const auto& [role, index] : here) {
      startRole(*role, index);
    }
  }

  // Note [Placing roles by host]: once every node has published its host name, start this node's roles; a name no
  // node has stops the job.
  void startRolesPlacedByHost() {
    if (nodeHosts_ == nullptr || rolesStopping_ || stopping()) {
      return;
    }
    try {
      const std::optional<std::vector<std::string>> hosts = nodeHosts_->hosts();
      if (!hosts) {
        return;
      }
      nodeHosts_.reset();
      startRoles(*hosts);
    } catch (const std::exception& e) {
      nodeHosts_.reset();
      launcherError_ = e.what();
      signalRunning(SIGTERM);
      stopDeadline_ = Clock::now() + kGracePeriod;
    }
  }
  // "; stopped the other ranks and the roles", or what of it applies, for the message about `failed`.
  std::string stoppedOthers(const Child& failed) const {
    const std::size_t ranks = rankCount();
    const std::size_t roles = children_.size() - ranks;
    std::vector<std::string> others;
    if (ranks > (failed.role ? 0U : 1U)) {
      others.emplace_back(failed.role ? "the ranks" : "the other ranks");
    }
    if (roles > (failed.role ? 1U : 0U)) {
      others.emplace_back(failed.role ? "the other roles" : "the roles");
    }
    return others.empty() ? "" : fmt::format("; stopped {}", fmt::join(others, " and "));
  }
  std::size_t rankCount() const {
    return static_cast<std::size_t>(
        std::count_if(children_.begin(), children_.end(), [](const Child& c) { return !c.role; }));
  }

  // This process's environment without the variables the launcher sets for its children.
  static std::vector<std::string> inheritedEnvironment() {
    static constexpr const char* kSet[] = {"RANK",        "LOCAL_RANK",  "WORLD_SIZE",     "LOCAL_WORLD_SIZE",
                                           "MASTER_ADDR", "MASTER_PORT", "STRATA_THREADS", "STRATA_JOB_ID"};
    std::vector<std::string> env;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const std::string_view text(*entry);
      const std::string_view name = text.substr(0, text.find('='));
      if (std::none_of(std::begin(kSet), std::end(kSet), [&](const char* set) { return name == set; })) {
        env.emplace_back(text);
      }
    }
    return env;
  }

  std::vector<std::string> rankEnvironment(int local) const {
    std::vector<std::string> env = inheritedEnvironment();
    addJobSecret(env);
    // An explicit STRATA_THREADS wins, as torchrun leaves a given OMP_NUM_THREADS alone.
    const int threads = std::max(1, availableCores() / options_.nproc);
    const std::string threadsText = environmentValue("STRATA_THREADS").value_or(std::to_string(threads));
    env.push_back(fmt::format("RANK={}", options_.nodeRank * options_.nproc + local));
    env.push_back(fmt::format("LOCAL_RANK={}", local));
    env.push_back(fmt::format("WORLD_SIZE={}", options_.nnodes * options_.nproc));
    env.push_back(fmt::format("LOCAL_WORLD_SIZE={}", options_.nproc));
    env.push_back(fmt::format("MASTER_ADDR={}", options_.masterAddr));
    env.push_back(fmt::format("MASTER_PORT={}", options_.masterPort));
    env.push_back(fmt::format("STRATA_THREADS={}", threadsText));
    return env;
  }

  void addJobSecret(std::vector<std::string>& env) const {
    for (std::string& entry : secret_.environment()) {
      env.push_back(std::move(entry));
    }
  }

  void startRank(int local) {
    const int rank = options_.nodeRank * options_.nproc + local;
    std::vector<std::string> env = rankEnvironment(local);
    env.push_back(fmt::format("STRATA_RANK_MAX_RESTARTS={}", rankRestartsAllowed()));
    Child& child = start(fmt::format("rank {}", rank), false, args_, env);
    child.rank = rank;
    // Note [Rejoining workers]: rank 0 serves the job's store, so it is never restarted.
    child.restartsLeft = rank > 0 ? rankRestartsAllowed() : 0;
  }

  // How often a rank may be restarted in this job: --max-restarts where the strategy takes restarted ranks back.
  int rankRestartsAllowed() const { return roles_.ranksMayRejoin ? options_.maxRestarts : 0; }

  // Note [Departed ranks]: tells the job's store that `child` (a rank, not 0) died, so the others stop waiting.
  void announceDeparture(const Child& child, int status) {
    try {
      if (departures_ == nullptr) {
        departures_ =
            std::make_unique<TcpStore>(TcpStoreOptions{.host = options_.masterAddr,
                                                       .port = static_cast<std::uint16_t>(options_.masterPort),
                                                       .isServer = false,
                                                       .timeout = std::chrono::seconds(30)});
      }
      departures_->setString(departedRankKey(child.rank),
                             fmt::format("{} {}", describe(child), describeStatus(status)));
    } catch (const std::exception& e) {
      spdlog::warn("cannot tell the job that {} departed: {}", describe(child), e.what());
    }
  }

  // A role process is this binary's `role` command; it is no rank (no RANK variables), it only needs the store.
  void startRole(const RoleRequest& role, int index) {
    RoleOptions flags;
    flags.name = role.name;
    flags.index = index;
    flags.count = role.count;
    flags.workers = options_.nnodes * options_.nproc;
    flags.nodes = options_.nnodes;
    flags.strategy = roles_.strategy;
    flags.strategyOptions = roles_.strategyOptions;
    flags.pluginDirs = roles_.pluginDirs;
    flags.timeoutS = roles_.timeoutS;
    std::vector<std::string> argv{args_.front()};
    for (std::string& arg : roleArguments(flags)) {
      argv.push_back(std::move(arg));
    }
    std::vector<std::string> env = inheritedEnvironment();
    addJobSecret(env);
    env.push_back(fmt::format("MASTER_ADDR={}", options_.masterAddr));
    env.push_back(fmt::format("MASTER_PORT={}", options_.masterPort));
    env.push_back(fmt::format("STRATA_RANK_MAX_RESTARTS={}", rankRestartsAllowed()));
    start(fmt::format("{} {}", role.name, index), true, argv, env).restartsLeft = role.maxRestarts;
  }

  // Note [launcher fork]: everything the child needs (argv, envp) is built before fork; between fork and exec
  // the child calls only async-signal-safe functions. PR_SET_PDEATHSIG fires when the forking *thread* exits,
  // which is this thread, alive until every child is reaped; the getppid check covers a launcher that died before
  // the prctl. All pipe ends are O_CLOEXEC, so no child holds another child's pipe open and EOF means exit.
  Child& start(std::string label, bool role, const std::vector<std::string>& args,
               const std::vector<std::string>& env) {
    Child& child = children_.emplace_back();
    child.label = std::move(label);
    child.role = role;
    child.args = args;
    child.env = env;
    launch(child);
    return child;
  }

  void launch(Child& child) {
    const std::vector<std::string>& args = child.args;
    std::vector<std::string> env = child.env;
    if (child.restarts > 0) {
      env.push_back(fmt::format("{}={}", child.role ? "STRATA_ROLE_RESTARTS" : "STRATA_RANK_RESTARTS", child.restarts));
    }
    std::vector<char*> argv;
    std::vector<char*> envp;
    for (const std::string& arg : args) {
      argv.push_back(const_cast<char*>(arg.c_str()));
    }
    argv.push_back(nullptr);
    for (const std::string& entry : env) {
      envp.push_back(const_cast<char*>(entry.c_str()));
    }
    envp.push_back(nullptr);

    int outPipe[2];
    int errPipe[2];
    if (::pipe2(outPipe, O_CLOEXEC) != 0) {
      fail("cannot create a pipe for {}: {}", describe(child), std::strerror(errno));
    }
    if (::pipe2(errPipe, O_CLOEXEC) != 0) {
      const int error = errno;
      ::close(outPipe[0]);
      ::close(outPipe[1]);
      fail("cannot create a pipe for {}: {}", describe(child), std::strerror(error));
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) {
        ::_exit(127);
      }
      ::dup2(outPipe[1], STDOUT_FILENO);  // dup2 clears O_CLOEXEC on the copy
      ::dup2(errPipe[1], STDERR_FILENO);
      pthread_sigmask(SIG_SETMASK, &oldMask_, nullptr);
      ::execve("/proc/self/exe", argv.data(), envp.data());
      static constexpr char kMessage[] = "strata: cannot execute /proc/self/exe for a rank or role\n";
      [[maybe_unused]] const ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
      ::_exit(127);
    }
    const int forkError = errno;
    ::close(outPipe[1]);
    ::close(errPipe[1]);
    child.out = Stream{outPipe[0], STDOUT_FILENO, {}};
    child.err = Stream{errPipe[0], STDERR_FILENO, {}};
    if (pid < 0) {
      fail("cannot start {}: fork failed: {}", describe(child), std::strerror(forkError));
    }
    child.pid = pid;
    child.running = true;
    ::fcntl(child.out.fd, F_SETFL, O_NONBLOCK);
    ::fcntl(child.err.fd, F_SETFL, O_NONBLOCK);
  }

  void supervise() {
    while (std::any_of(children_.begin(), children_.end(), [](const Child& c) { return c.running; })) {
      std::vector<pollfd> fds{{signalFd_, POLLIN, 0}};
      std::vector<Stream*> streams;
      for (Child& child : children_) {
        for (Stream* stream : {&child.out, &child.err}) {
          if (stream->fd >= 0) {
            fds.push_back({stream->fd, POLLIN, 0});
            streams.push_back(stream);
          }
        }
      }
      // A bounded wait: reaping is polled too, so a coalesced SIGCHLD can never stall the loop.
      if (::poll(fds.data(), fds.size(), 200) < 0 && errno != EINTR) {
        fail("poll failed in the rank launcher: {}", std::strerror(errno));
      }
      // Signals before reaping, always: a rank that died of the terminal's SIGINT is then not taken for a failure.
      readSignals();
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
          pump(*streams[i - 1]);
        }
      }
      reap();
      startRolesPlacedByHost();
      if (stopDeadline_ && !killed_ && Clock::now() >= *stopDeadline_) {
        signalRunning(SIGKILL);
        killed_ = true;
      }
    }
  }

  void readSignals() {
    signalfd_siginfo info{};
    while (::read(signalFd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
      const int signal = static_cast<int>(info.ssi_signo);
      if (signal != SIGINT && signal != SIGTERM) {
        continue;  // SIGCHLD: reap() runs every round anyway
      }
      if (stopping()) {
        // Asked again while stopping: do not make the user wait out the grace period.
        signalRunning(SIGKILL);
        killed_ = true;
        continue;
      }
      interruptedBy_ = signal;
      signalRunning(signal);
      stopDeadline_ = Clock::now() + kGracePeriod;
    }
  }

  void reap() {
    Child* firstFailure = nullptr;
    for (Child& child : children_) {
      if (!child.running) {
        continue;
      }
      int status = 0;
      const pid_t done = ::waitpid(child.pid, &status, WNOHANG | WUNTRACED | WCONTINUED);
      if (done != child.pid) {
        continue;
      }
      // A stopped rank (SIGSTOP, SIGTSTP, a debugger) holds up every collective until the timeout; say so at once.
      if (WIFSTOPPED(status)) {
        const char* name = sigabbrev_np(WSTOPSIG(status));
        spdlog::warn("{} was stopped by signal {}{}; the other ranks wait for it until their --timeout",
                     describe(child), WSTOPSIG(status), name != nullptr ? fmt::format(" (SIG{})", name) : "");
        continue;
      }
      if (WIFCONTINUED(status)) {
        spdlog::info("{} continues", describe(child));
        continue;
      }
      child.running = false;
      child.status = status;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (child.role && rolesStopping_) {
        // Asked to stop: SIGTERM, SIGKILL or a clean exit is the stop's; anything else is the role's own error,
        // worth a warning but not a failed job (the training is done).
        const bool stopped =
            ok || (WIFSIGNALED(status) && (WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGKILL));
        if (!stopped && !stopping()) {
          spdlog::warn("{} {} when asked to stop after the workers finished", describe(child), describeStatus(status));
        }
        continue;
      }
      // Note [restarting roles]: a role the strategy can recover (a parameter server that reloads its checkpoint)
      // is started again, with the same arguments, up to its RoleRequest::maxRestarts times.
      // Note [Rejoining workers]: so is a rank other than 0 the strategy can take back (--max-restarts).
      if (!ok && child.restartsLeft > 0 && !stopping()) {
        drain(child.out);
        drain(child.err);
        closeStream(child.out);
        closeStream(child.err);
        --child.restartsLeft;
        ++child.restarts;
        spdlog::warn("{} {}; restarting it ({} restart(s) left)", describe(child), describeStatus(status),
                     child.restartsLeft);
        launch(child);
        continue;
      }
      if (!ok && !child.role && roles_.ranksMayDepart && child.rank > 0 && !stopping()) {
        const auto left =
            std::count_if(children_.begin(), children_.end(), [](const Child& c) { return !c.role && c.running; });
        spdlog::warn("{} {}; the strategy goes on without it ({} local rank(s) left)", describe(child),
                     describeStatus(status), left);
        announceDeparture(child, status);
        continue;
      }
      // A role that exits cleanly before the ranks are done is its own business (a one-shot helper); one that
      // fails would leave the ranks waiting for it until their timeout, so it ends the job now.
      // Note [first failure]: a rank killed by a signal makes its peers fail within milliseconds (connection
      // closed), often before the next reap; among the failures seen in one round the one killed by a signal is
      // named, since the others' errors are its consequences.
      if (!ok && !stopping() &&
          (firstFailure == nullptr || (WIFSIGNALED(status) && !WIFSIGNALED(firstFailure->status)))) {
        firstFailure = &child;
      }
    }
    if (firstFailure != nullptr) {
      failed_ = firstFailure;
      signalRunning(SIGTERM);
      stopDeadline_ = Clock::now() + kGracePeriod;
    }
    stopRolesWhenRanksAreDone();
  }

  // Note [stopping roles]: roles serve the ranks, so they run until the last rank has exited, whatever its status;
  // then they get SIGTERM (RoleContext::stopRequested) and SIGKILL after the grace period.
  void stopRolesWhenRanksAreDone() {
    if (rolesStopping_ ||
        std::any_of(children_.begin(), children_.end(), [](const Child& c) { return !c.role && c.running; })) {
      return;
    }
    rolesStopping_ = true;
    bool any = false;
    for (const Child& child : children_) {
      if (child.role && child.running) {
        ::kill(child.pid, SIGTERM);
        any = true;
      }
    }
    if (any && !stopDeadline_) {
      stopDeadline_ = Clock::now() + kGracePeriod;
    }
  }

  // A stopped child keeps SIGTERM pending until it continues: SIGCONT after it, so a stopped rank ends now
  // rather than at the SIGKILL after the grace period.
  void signalRunning(int signal) {
    for (const Child& child : children_) {
      if (child.running) {
        ::kill(child.pid, signal);
        if (signal == SIGTERM || signal == SIGINT) {
          ::kill(child.pid, SIGCONT);
        }
      }
    }
  }

  // Reads what is there and passes on complete lines; closes the stream at EOF.
  void pump(Stream& stream) {
    const std::string& owner = labelOf(stream);
    char buffer[65536];
    while (stream.fd >= 0) {
      const ssize_t n = ::read(stream.fd, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0) {
        return;  // EAGAIN: nothing more for now
      }
      if (n == 0) {
        if (!stream.pending.empty()) {
          writeAll(stream.target, fmt::format("[{}] {}\n", owner, stream.pending));
          stream.pending.clear();
        }
        closeStream(stream);
        return;
      }
      stream.pending.append(buffer, static_cast<std::size_t>(n));
      std::string lines;
      std::size_t begin = 0;
      for (std::size_t newline; (newline = stream.pending.find('\n', begin)) != std::string::npos;
           begin = newline + 1) {
        lines += fmt::format("[{}] ", owner);
        lines.append(stream.pending, begin, newline + 1 - begin);
      }
      stream.pending.erase(0, begin);
      if (stream.pending.size() >= kMaxLine) {
        lines += fmt::format("[{}] {}\n", owner, stream.pending);
        stream.pending.clear();
      }
      // One write per read keeps each line whole in the launcher's output.
      writeAll(stream.target, lines);
    }
  }

  // After every rank has exited: what is left in the pipes, then the last partial lines.
  void drain(Stream& stream) {
    while (stream.fd >= 0) {
      const int before = stream.fd;
      pump(stream);
      if (stream.fd == before) {
        // EAGAIN with the writer gone can only mean someone else holds the pipe open; do not wait for them.
        if (!stream.pending.empty()) {
          writeAll(stream.target, fmt::format("[{}] {}\n", labelOf(stream), stream.pending));
          stream.pending.clear();
        }
        closeStream(stream);
      }
    }
  }

  const std::string& labelOf(const Stream& stream) const {
    static const std::string kUnknown = "?";
    for (const Child& child : children_) {
      if (&child.out == &stream || &child.err == &stream) {
        return child.label;
      }
    }
    return kUnknown;
  }

  static void closeStream(Stream& stream) {
    if (stream.fd >= 0) {
      ::close(stream.fd);
      stream.fd = -1;
    }
  }

  LaunchOptions options_;
  RoleLaunch roles_;
  JobSecret secret_;                      // Note [job secret]: removed when the launcher ends
  std::unique_ptr<TcpStore> departures_;  // a client of the job's store, made when a rank departs
  std::vector<std::string> args_;
  std::vector<Child> children_;
  int signalFd_ = -1;
  sigset_t oldMask_{};
  int interruptedBy_ = 0;
  const Child* failed_ = nullptr;
  std::string launcherError_;             // the launcher's own reason to stop the job (a role placement it cannot make)
  std::unique_ptr<NodeHosts> nodeHosts_;  // Note [Placing roles by host], until the roles are placed
  std::optional<Clock::time_point> stopDeadline_;
  bool killed_ = false;
  bool rolesStopping_ = false;
};

}  // namespace detail

void addLaunchOptions(CLI::App& command, LaunchOptions& options) {
  command.add_option("--nproc,--nproc-per-node", options.nproc, "ranks to start on this node (as torchrun)")
      ->check(CLI::PositiveNumber);
  command.add_option("--nnodes", options.nnodes, "nodes in the job; start the same command on each")
      ->check(CLI::PositiveNumber);
  command.add_option("--node-rank", options.nodeRank, "this node's index, 0 to nnodes-1")
      ->check(CLI::NonNegativeNumber);
  command.add_option("--master-addr", options.masterAddr, "host of rank 0's rendezvous store");
  command.add_option("--master-port", options.masterPort, "port of rank 0's rendezvous store")
      ->check(CLI::Range(1, 65535));
  command
      .add_option("--max-restarts", options.maxRestarts,
                  "start a rank other than 0 that dies again, up to N times, and let it rejoin (strategies that "
                  "can take it back: ps mode=sync)")
      ->check(CLI::NonNegativeNumber);
}

namespace detail {

// Note [Slurm roles]: under srun every process of the job is a task, the strategy's role processes included: the
// first tasks run the roles (in the order the strategy declares them, each from index 0), the others are the
// workers, numbered from 0 (RANK = SLURM_PROCID - roles, WORLD_SIZE = SLURM_NTASKS - roles). A worker's local rank
// counts the workers on its node only, so the first worker of a node takes its first GPU. The tasks on this node are
// SLURM_GTIDS where srun sets it, else they follow from the tasks per node and srun's distribution (block or
// cyclic). Rank 0's store is on the node of task `roles` (worker 0), which MASTER_ADDR names, or else which the
// step's node list and that layout give.
void placeSlurmRoles(RankEnvironment& env, const std::vector<RoleRequest>& roles, int procId, int localId, int tasks) {
  int roleTasks = 0;
  for (const RoleRequest& role : roles) {
    if ((!role.nodes.empty() || !role.hosts.empty()) && role.count > 0) {
      fail(
          "role '{}' is placed on {} ({}), which strata's own launcher does; under srun the first {} task(s) run the "
          "roles, on the nodes srun gives them: drop the placement and choose the nodes with srun (e.g. its "
          "--distribution, --nodelist)",
          role.name, role.nodes.empty() ? "hosts" : "node ranks",
          role.nodes.empty() ? fmt::format("{}", fmt::join(role.hosts, ","))
                             : fmt::format("{}", fmt::join(role.nodes, ",")),
          roleTasks + role.count);
    }
    roleTasks += role.count;
  }
  if (roleTasks == 0) {
    return;
  }
  std::vector<std::string> declared;
  for (const RoleRequest& role : roles) {
    declared.push_back(fmt::format("{} x{}", role.name, role.count));
  }
  if (tasks <= roleTasks) {
    fail(
        "srun started {} task(s) (SLURM_NTASKS), but the strategy's roles take the first {} ({}) and the job needs "
        "at least one worker: start {} or more tasks",
        tasks, roleTasks, fmt::join(declared, ", "), roleTasks + 1);
  }
  // The global ids of the tasks on this node.
  std::vector<int> here;
  const auto perNode = environmentValue("SLURM_STEP_TASKS_PER_NODE") ? environmentValue("SLURM_STEP_TASKS_PER_NODE")
                                                                     : environmentValue("SLURM_TASKS_PER_NODE");
  const char* perNodeName =
      environmentValue("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
  std::vector<int> counts = perNode ? taskCounts(perNodeName, *perNode) : std::vector<int>{tasks};
  const std::string distribution = environmentValue("SLURM_DISTRIBUTION").value_or("");
  const std::optional<std::vector<int>> layout = taskNodes(counts, distribution);
  if (layout && layout->size() != static_cast<std::size_t>(tasks)) {
    fail("{}='{}' describes {} tasks, but SLURM_NTASKS says {}", perNodeName, perNode.value_or(""), layout->size(),
         tasks);
  }
  const int nodeId =
      environmentValue("SLURM_NODEID") ? nonNegative("SLURM_NODEID", *environmentValue("SLURM_NODEID")) : 0;
  if (const auto gtids = environmentValue("SLURM_GTIDS")) {
    std::size_t at = 0;
    while (at <= gtids->size()) {
      const std::size_t comma = std::min(gtids->find(',', at), gtids->size());
      here.push_back(nonNegative("SLURM_GTIDS", gtids->substr(at, comma - at)));
      at = comma + 1;
    }
  } else if (layout) {
    for (int t = 0; t < tasks; ++t) {
      if ((*layout)[static_cast<std::size_t>(t)] == nodeId) {
        here.push_back(t);
      }
    }
  } else {
    fail(
        "srun's distribution '{}' (SLURM_DISTRIBUTION) does not say which tasks share a node, and SLURM_GTIDS is not "
        "set: run the roles' tasks with --distribution block or cyclic",
        distribution);
  }
  std::sort(here.begin(), here.end());
  if (std::find(here.begin(), here.end(), procId) == here.end() ||
      std::count_if(here.begin(), here.end(), [&](int t) { return t < procId; }) != localId) {
    fail(
        "task {} (SLURM_PROCID) with local id {} (SLURM_LOCALID) is not where the tasks of node {} ({}) put it; "
        "srun's layout is not the one Strata read (SLURM_DISTRIBUTION='{}')",
        procId, localId, nodeId, fmt::join(here, ","), distribution);
  }
  const int workersHere =
      static_cast<int>(std::count_if(here.begin(), here.end(), [&](int t) { return t >= roleTasks; }));
  if (procId < roleTasks) {
    int first = 0;
    for (const RoleRequest& role : roles) {
      if (procId < first + role.count) {
        env.roleTask = RankEnvironment::RoleTask{role.name, procId - first, role.count};
        break;
      }
      first += role.count;
    }
    env.rank = -1;
    env.localRank = -1;
  } else {
    env.rank = procId - roleTasks;
    env.localRank =
        static_cast<int>(std::count_if(here.begin(), here.end(), [&](int t) { return t >= roleTasks && t < procId; }));
  }
  env.worldSize = tasks - roleTasks;
  env.localWorldSize = std::max(1, workersHere);
  env.roleTasks = roleTasks;
  if (!environmentValue("MASTER_ADDR")) {
    if (!layout) {
      fail(
          "set MASTER_ADDR to the host of task {} (worker rank 0, whose store the job meets at): srun's distribution "
          "'{}' does not say which node runs it",
          roleTasks, distribution);
    }
    const auto nodes = environmentValue("SLURM_STEP_NODELIST") ? environmentValue("SLURM_STEP_NODELIST")
                                                               : environmentValue("SLURM_JOB_NODELIST");
    if (nodes && !nodes->empty()) {
      const std::vector<std::string> hosts = expandHostList(*nodes);
      const int node = (*layout)[static_cast<std::size_t>(roleTasks)];
      if (node >= static_cast<int>(hosts.size())) {
        fail("worker rank 0 (task {}) runs on node {}, but the node list '{}' names {} host(s)", roleTasks, node,
             *nodes, hosts.size());
      }
      env.masterAddr = hosts[static_cast<std::size_t>(node)];
    }
  }
}

}  // namespace detail

RankEnvironment rankEnvironment(const std::vector<RoleRequest>& roles) {
  using detail::environmentValue;
  RankEnvironment env;
  if (const auto rank = environmentValue("RANK")) {
    env.distributed = true;
    env.rank = detail::nonNegative("RANK", *rank);
    const auto world = environmentValue("WORLD_SIZE");
    if (!world) {
      fail("environment variable RANK='{}' is set but WORLD_SIZE is not; a launcher sets both", *rank);
    }
    env.worldSize = detail::positive("WORLD_SIZE", *world);
    // Without the local variables, assume one node.
    const auto local = environmentValue("LOCAL_RANK");
    env.localRank = local ? detail::nonNegative("LOCAL_RANK", *local) : env.rank;
    const auto localWorld = environmentValue("LOCAL_WORLD_SIZE");
    env.localWorldSize = localWorld ? detail::positive("LOCAL_WORLD_SIZE", *localWorld) : env.worldSize;
  } else if (const auto procId = environmentValue("SLURM_PROCID")) {
    env.distributed = true;
    env.rank = detail::nonNegative("SLURM_PROCID", *procId);
    // The step's task count is what srun started; SLURM_NTASKS may describe the whole allocation.
    const char* worldName = environmentValue("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
    const auto world = environmentValue(worldName);
    if (!world) {
      fail("environment variable SLURM_PROCID='{}' is set but SLURM_NTASKS is not; start the ranks with srun", *procId);
    }
    env.worldSize = detail::positive(worldName, *world);
    const auto local = environmentValue("SLURM_LOCALID");
    env.localRank = local ? detail::nonNegative("SLURM_LOCALID", *local) : env.rank;
    if (const auto perNode = environmentValue("SLURM_NTASKS_PER_NODE")) {
      env.localWorldSize = detail::positive("SLURM_NTASKS_PER_NODE", *perNode);
    } else if (const auto stepPerNode = environmentValue("SLURM_STEP_TASKS_PER_NODE")) {
      const auto node = environmentValue("SLURM_NODEID");
      env.localWorldSize = detail::tasksOnNode("SLURM_STEP_TASKS_PER_NODE", *stepPerNode,
                                               node ? detail::nonNegative("SLURM_NODEID", *node) : 0);
    } else {
      env.localWorldSize = env.worldSize;
    }
    if (!environmentValue("MASTER_ADDR")) {
      const auto nodes = environmentValue("SLURM_STEP_NODELIST") ? environmentValue("SLURM_STEP_NODELIST")
                                                                 : environmentValue("SLURM_JOB_NODELIST");
      if (nodes && !nodes->empty()) {
        env.masterAddr = detail::firstHost(*nodes);
      }
    }
    if (env.rank >= env.worldSize) {
      fail("rank {} is not below the world size {} (check RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS)", env.rank,
           env.worldSize);
    }
    detail::placeSlurmRoles(env, roles, env.rank, env.localRank, env.worldSize);
  }
  if (const auto addr = environmentValue("MASTER_ADDR")) {
    if (addr->empty()) {
      fail("environment variable MASTER_ADDR is empty; set it to the host of rank 0");
    }
    env.masterAddr = *addr;
  }
  if (const auto portText = environmentValue("MASTER_PORT")) {
    env.masterPort = detail::port("MASTER_PORT", *portText);
  }
  if (env.roleTask) {
    return env;  // a role process: no rank of its own
  }
  if (env.rank >= env.worldSize) {
    fail("rank {} is not below the world size {} (check RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS)", env.rank,
         env.worldSize);
  }
  if (env.localWorldSize > env.worldSize || env.localRank >= env.localWorldSize) {
    fail(
        "local rank {} of {} local ranks does not fit a world of {} (check LOCAL_RANK/LOCAL_WORLD_SIZE or "
        "SLURM_LOCALID/SLURM_NTASKS_PER_NODE)",
        env.localRank, env.localWorldSize, env.worldSize);
  }
  return env;
}

std::optional<int> launchIfNeeded(const LaunchOptions& options, const RoleLaunch& roles,
                                  std::vector<std::string> args) {
  // Role processes need a launcher (and rank 0's store) even around a single rank.
  const bool anyRole =
      std::any_of(roles.roles.begin(), roles.roles.end(), [](const RoleRequest& r) { return r.count > 0; });
  if (options.nproc <= 1 && options.nnodes <= 1 && !anyRole) {
    return std::nullopt;
  }
  // Already a rank: started by this launcher, torchrun, or srun (which starts every rank itself).
  if (detail::environmentValue("RANK") || detail::environmentValue("SLURM_PROCID")) {
    return std::nullopt;
  }
  if (options.nproc < 1 || options.nnodes < 1) {
    fail("--nproc {} and --nnodes {} must both be at least 1", options.nproc, options.nnodes);
  }
  if (options.nodeRank < 0 || options.nodeRank >= options.nnodes) {
    fail("--node-rank {} is not in 0..{} (--nnodes {})", options.nodeRank, options.nnodes - 1, options.nnodes);
  }
  if (options.masterPort < 1 || options.masterPort > 65535) {
    fail("--master-port {} is not a port number (1-65535)", options.masterPort);
  }
  detail::checkRoles(roles);
  detail::RankLauncher launcher(options, roles, args.empty() ? detail::ownCommandLine() : std::move(args));
  return launcher.run();
}

bool rankEnvironmentIsLauncher(const LaunchOptions& options) {
  return (options.nproc > 1 || options.nnodes > 1) && !detail::environmentValue("RANK") &&
         !detail::environmentValue("SLURM_PROCID");
}

int rankRestarts() {
  const auto value = detail::environmentValue("STRATA_RANK_RESTARTS");
  return value ? detail::nonNegative("STRATA_RANK_RESTARTS", *value) : 0;
}

int threadsFromEnvironment() {
  const auto value = detail::environmentValue("STRATA_THREADS");
  return value ? detail::positive("STRATA_THREADS", *value) : 0;
}

void prepareRank(const RankEnvironment& environment) {
  if (environment.distributed) {
    // stdout is a pipe to the launcher: flush each line so it arrives as printed and survives a SIGTERM.
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
  }
  const auto value = detail::environmentValue("STRATA_TEST_EXIT_RANK");
  if (!value || detail::nonNegative("STRATA_TEST_EXIT_RANK", *value) != environment.rank) {
    return;
  }
  fmt::print("test hook STRATA_TEST_EXIT_RANK: rank {} exits with status 3\n", environment.rank);
  std::fflush(stdout);
  std::exit(3);
}

}  // namespace strata::cli
