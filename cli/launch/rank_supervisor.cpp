#include "launch/rank_supervisor.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "launch/child_output.h"
#include "launch/child_process.h"
#include "launch/environment_variables.h"
#include "launch/job_secret.h"
#include "launch/node_hosts.h"
#include "launch/role_command.h"
#include "strata/comm/tcp_store.h"
#include "strata/error.h"

extern char** environ;

namespace strata::cli::detail {

using Clock = std::chrono::steady_clock;

// How long a rank or role may take to exit after SIGTERM before it gets SIGKILL.
constexpr auto kGracePeriod = std::chrono::seconds(5);
// How long a departure announcement tries to reach the job's store (Note [Departed ranks]).
constexpr auto kDepartureConnectTimeout = std::chrono::seconds(5);

int availableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    return std::max(1, CPU_COUNT(&set));
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// Starts the local ranks, and the role processes placed on this node, and supervises them until all have exited.
class RankSupervisor {
 public:
  RankSupervisor(const LaunchOptions& options, const RoleLaunch& roles, std::vector<std::string> args)
      : options_(options), roles_(roles), args_(std::move(args)) {
    std::size_t processes = static_cast<std::size_t>(options_.nproc);
    for (const RoleRequest& role : roles_.roles) {
      processes += static_cast<std::size_t>(role.count);
    }
    children_.reserve(processes);  // pointers to children (failed_, streams) must stay valid
  }

  ~RankSupervisor() {
    // Only reached with children still running when start() failed half-way; never leave them behind.
    for (ChildProcess& child : children_) {
      if (child.running) {
        ::kill(child.pid, SIGKILL);
        ::waitpid(child.pid, nullptr, 0);
      }
      closeChildStream(child.out);
      closeChildStream(child.err);
    }
    if (signalFd_ >= 0) {
      ::close(signalFd_);
      pthread_sigmask(SIG_SETMASK, &oldMask_, nullptr);
    }
  }

  RankSupervisor(const RankSupervisor&) = delete;
  RankSupervisor& operator=(const RankSupervisor&) = delete;

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
    for (ChildProcess& child : children_) {
      drainChildStream(child.out, child.label);
      drainChildStream(child.err, child.label);
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
      fail("{} {}{}{}", describeChild(*failed_), describeWaitStatus(failed_->status),
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
  std::string stoppedOthers(const ChildProcess& failed) const {
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
        std::count_if(children_.begin(), children_.end(), [](const ChildProcess& c) { return !c.role; }));
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

  std::vector<std::string> rankVariables(int local) const {
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
    std::vector<std::string> env = rankVariables(local);
    env.push_back(fmt::format("STRATA_RANK_MAX_RESTARTS={}", rankRestartsAllowed()));
    ChildProcess& child = start(fmt::format("rank {}", rank), false, args_, env);
    child.rank = rank;
    // Note [Rejoining workers]: rank 0 serves the job's store, so it is never restarted.
    child.restartsLeft = rank > 0 ? rankRestartsAllowed() : 0;
  }

  // How often a rank may be restarted in this job: --max-restarts where the strategy takes restarted ranks back.
  int rankRestartsAllowed() const { return roles_.ranksMayRejoin ? options_.maxRestarts : 0; }

  // Whether this node's rank 0, which serves the job's store, has exited (reaped or not yet: WNOWAIT leaves it for
  // the reaping loop). False where rank 0 runs on another node.
  bool localStoreServerExited() const {
    for (const ChildProcess& c : children_) {
      if (!c.role && c.rank == 0) {
        if (!c.running) {
          return true;
        }
        siginfo_t info{};
        return waitid(P_PID, static_cast<id_t>(c.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == c.pid;
      }
    }
    return false;
  }

  // Note [Departed ranks]: tells the job's store that `child` (a rank, not 0) died, so the others stop waiting.
  // Not when this node's rank 0 has exited too (every rank failing at once, a loss gone NaN everywhere): its store
  // is gone. The store has served the job since it started, so it answers at once if it is there at all; the
  // connection gives up after kDepartureConnectTimeout (it was 30 s per departed rank, retrying a refused connection
  // to a store whose rank had failed, before the job was reported failed).
  void announceDeparture(const ChildProcess& child, int status) {
    if (localStoreServerExited()) {
      return;
    }
    try {
      if (departures_ == nullptr) {
        departures_ =
            std::make_unique<TcpStore>(TcpStoreOptions{.host = options_.masterAddr,
                                                       .port = static_cast<std::uint16_t>(options_.masterPort),
                                                       .isServer = false,
                                                       .timeout = kDepartureConnectTimeout});
      }
      departures_->setString(departedRankKey(child.rank),
                             fmt::format("{} {}", describeChild(child), describeWaitStatus(status)));
    } catch (const std::exception& e) {
      spdlog::warn("cannot tell the job that {} departed: {}", describeChild(child), e.what());
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

  ChildProcess& start(std::string label, bool role, const std::vector<std::string>& args,
                      const std::vector<std::string>& env) {
    ChildProcess& child = children_.emplace_back();
    child.label = std::move(label);
    child.role = role;
    child.args = args;
    child.env = env;
    spawnChild(child, oldMask_);
    return child;
  }

  void supervise() {
    while (std::any_of(children_.begin(), children_.end(), [](const ChildProcess& c) { return c.running; })) {
      std::vector<pollfd> fds{{signalFd_, POLLIN, 0}};
      std::vector<std::pair<ChildStream*, const std::string*>> streams;  // and the label of their child
      for (ChildProcess& child : children_) {
        for (ChildStream* stream : {&child.out, &child.err}) {
          if (stream->fd >= 0) {
            fds.push_back({stream->fd, POLLIN, 0});
            streams.emplace_back(stream, &child.label);
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
          pumpChildStream(*streams[i - 1].first, *streams[i - 1].second);
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
    ChildProcess* firstFailure = nullptr;
    for (ChildProcess& child : children_) {
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
                     describeChild(child), WSTOPSIG(status), name != nullptr ? fmt::format(" (SIG{})", name) : "");
        continue;
      }
      if (WIFCONTINUED(status)) {
        spdlog::info("{} continues", describeChild(child));
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
          spdlog::warn("{} {} when asked to stop after the workers finished", describeChild(child),
                       describeWaitStatus(status));
        }
        continue;
      }
      // Note [restarting roles]: a role the strategy can recover (a parameter server that reloads its checkpoint)
      // is started again, with the same arguments, up to its RoleRequest::maxRestarts times.
      // Note [Rejoining workers]: so is a rank other than 0 the strategy can take back (--max-restarts).
      if (!ok && child.restartsLeft > 0 && !stopping()) {
        drainChildStream(child.out, child.label);
        drainChildStream(child.err, child.label);
        closeChildStream(child.out);
        closeChildStream(child.err);
        --child.restartsLeft;
        ++child.restarts;
        spdlog::warn("{} {}; restarting it ({} restart(s) left)", describeChild(child), describeWaitStatus(status),
                     child.restartsLeft);
        spawnChild(child, oldMask_);
        continue;
      }
      if (!ok && !child.role && roles_.ranksMayDepart && child.rank > 0 && !stopping()) {
        const auto left = std::count_if(children_.begin(), children_.end(),
                                        [](const ChildProcess& c) { return !c.role && c.running; });
        spdlog::warn("{} {}; the strategy goes on without it ({} local rank(s) left)", describeChild(child),
                     describeWaitStatus(status), left);
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
        std::any_of(children_.begin(), children_.end(), [](const ChildProcess& c) { return !c.role && c.running; })) {
      return;
    }
    rolesStopping_ = true;
    bool any = false;
    for (const ChildProcess& child : children_) {
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
    for (const ChildProcess& child : children_) {
      if (child.running) {
        ::kill(child.pid, signal);
        if (signal == SIGTERM || signal == SIGINT) {
          ::kill(child.pid, SIGCONT);
        }
      }
    }
  }

  LaunchOptions options_;
  RoleLaunch roles_;
  JobSecret secret_;                      // Note [job secret]: removed when the launcher ends
  std::unique_ptr<TcpStore> departures_;  // a client of the job's store, made when a rank departs
  std::vector<std::string> args_;
  std::vector<ChildProcess> children_;
  int signalFd_ = -1;
  sigset_t oldMask_{};
  int interruptedBy_ = 0;
  const ChildProcess* failed_ = nullptr;
  std::string launcherError_;             // the launcher's own reason to stop the job (a role placement it cannot make)
  std::unique_ptr<NodeHosts> nodeHosts_;  // Note [Placing roles by host], until the roles are placed
  std::optional<Clock::time_point> stopDeadline_;
  bool killed_ = false;
  bool rolesStopping_ = false;
};

int superviseRanks(const LaunchOptions& options, const RoleLaunch& roles, std::vector<std::string> args) {
  RankSupervisor supervisor(options, roles, std::move(args));
  return supervisor.run();
}

}  // namespace strata::cli::detail
