#include "compare/compare_runner.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/model_options.h"
#include "run/run_outputs.h"
#include "strata/error.h"

namespace fs = std::filesystem;

namespace strata::cli {
namespace {

constexpr int kStateVersion = 1;

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string formatDuration(double seconds) {
  const auto s = static_cast<long>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60)
         : s >= 60 ? fmt::format("{}m{:02}s", s / 60, s % 60)
                   : fmt::format("{}s", s);
}

// Runs `strata ARGS...` (this executable) with stdout and stderr into `log`; calls `tick` about every second while
// it runs. Returns the wait status. The child stays in this process group, so Ctrl-C ends it with the comparison.
int runStrata(const std::vector<std::string>& args, const fs::path& log, const std::function<void()>& tick) {
  std::vector<std::string> argv = {"strata"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> pointers;
  for (std::string& a : argv) {
    pointers.push_back(a.data());
  }
  pointers.push_back(nullptr);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  STRATA_CHECK(fd >= 0, "{}: cannot open for writing: {}", log.string(), std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int devNull = ::open("/dev/null", O_RDONLY);
    if (devNull < 0 || ::dup2(devNull, STDIN_FILENO) < 0 || ::dup2(fd, STDOUT_FILENO) < 0 ||
        ::dup2(fd, STDERR_FILENO) < 0) {
      ::_exit(127);
    }
    ::execv("/proc/self/exe", pointers.data());
    static constexpr char kMessage[] = "strata compare: cannot execute /proc/self/exe\n";
    [[maybe_unused]] const auto written = ::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
    ::_exit(127);
  }
  ::close(fd);
  STRATA_CHECK(pid > 0, "strata compare: cannot start a run: {}", std::strerror(errno));
  int status = 0;
  auto lastTick = std::chrono::steady_clock::now();
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      return status;
    }
    STRATA_CHECK(done == 0 || errno == EINTR, "strata compare: waiting for pid {}: {}", pid, std::strerror(errno));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (since(lastTick) >= 1.0) {
      lastTick = std::chrono::steady_clock::now();
      tick();
    }
  }
}

nlohmann::json stateToJson(const RunState& s) {
  return {{"name", s.name},
          {"status", s.status},
          {"exit_code", s.exitCode ? nlohmann::json(*s.exitCode) : nlohmann::json(nullptr)},
          {"reason", s.reason},
          {"duration_s", s.durationS}};
}

}  // namespace

std::vector<std::string> trainArguments(const CompareConfiguration& c, const fs::path& runDir, int masterPort) {
  std::vector<std::string> args = {"train",      modelPathOf(c), "--nproc", std::to_string(c.worldSize),
                                   "--strategy", c.strategy};
  for (const std::string& option : c.strategyOptions) {
    args.insert(args.end(), {"--strategy-opt", option});
  }
  args.insert(args.end(), c.trainArgs.begin(), c.trainArgs.end());
  if (!trainArgValue(c.trainArgs, "--master-port")) {
    args.insert(args.end(), {"--master-port", std::to_string(masterPort)});
  }
  args.insert(args.end(), {"--out", runDir.string()});
  return args;
}

std::vector<std::string> planArguments(const CompareConfiguration& c, const fs::path& jsonPath) {
  std::vector<std::string> args = {"plan",       modelPathOf(c), "--world-size", std::to_string(c.worldSize),
                                   "--strategy", c.strategy};
  for (const std::string& option : c.strategyOptions) {
    args.insert(args.end(), {"--strategy-opt", option});
  }
  for (const char* flag : {"--nnodes", "--batch-size", "--threads", "--optimizer", "--channels-last"}) {
    if (const std::optional<std::string> value = trainArgValue(c.trainArgs, flag)) {
      args.insert(args.end(), {flag, *value});
    }
  }
  args.insert(args.end(), {"--json", jsonPath.string()});
  return args;
}

std::string failureReason(const fs::path& log, int status, const std::string& command) {
  std::ifstream in(log);
  std::string launcherError;
  std::string anyError;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("error: ")) {
      launcherError = line.substr(7);
    } else if (line.find("error: ") != std::string::npos && anyError.empty()) {
      anyError = line;  // the first rank to fail usually says why; the others follow it
    }
  }
  std::string why = !anyError.empty() && !launcherError.empty() ? fmt::format("{} ({})", launcherError, anyError)
                    : !launcherError.empty()                    ? launcherError
                                                                : anyError;
  if (WIFSIGNALED(status)) {
    const std::string signal = fmt::format("strata {} was killed by signal {} ({})", command, WTERMSIG(status),
                                           sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status)) : "?");
    return why.empty() ? signal : fmt::format("{}; {}", signal, why);
  }
  if (why.empty()) {
    why = fmt::format("strata {} exited with status {} and no error line (see {})", command, WEXITSTATUS(status),
                      log.string());
  }
  return why;
}

ComparisonRunner::ComparisonRunner(CompareSpec spec, CompareRunOptions options)
    : spec_(std::move(spec)), options_(std::move(options)), configurations_(expandConfigurations(spec_)) {
  for (const CompareConfiguration& c : configurations_) {
    states_.emplace_back(c.name);
  }
}

ComparisonRunner ComparisonRunner::resume(const fs::path& out, CompareRunOptions options) {
  const fs::path file = out / "comparison.json";
  std::ifstream in(file);
  STRATA_CHECK(in.good(), "{}: not found; --resume takes the OUT directory of an earlier strata compare",
               file.string());
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({}); start the comparison again in a new directory", file.string(), e.what());
  }
  STRATA_CHECK(document.value("version", 0) == kStateVersion && document.contains("spec") &&
                   document.contains("runs") && document["runs"].is_array(),
               "{}: not a comparison state of version {} (fields version, spec, runs)", file.string(), kStateVersion);
  options.out = out;
  ComparisonRunner runner(compareSpecFromJson(document["spec"], file.string() + ": spec"), options);
  for (const nlohmann::json& saved : document["runs"]) {
    const std::string name = saved.value("name", "");
    for (RunState& state : runner.states_) {
      if (state.name == name && saved.value("status", "") == "done") {
        state = RunState(name, "done");
        state.exitCode = 0;
        state.durationS = saved.value("duration_s", 0.0);
      }
    }
  }
  return runner;
}

void ComparisonRunner::saveState() const {
  nlohmann::json runs = nlohmann::json::array();
  for (const RunState& s : states_) {
    runs.push_back(stateToJson(s));
  }
  writeJsonAtomically(options_.out / "comparison.json",
                      {{"version", kStateVersion}, {"spec", compareSpecToJson(spec_)}, {"runs", runs}});
}

int ComparisonRunner::runAll() {
  fs::create_directories(options_.out / "runs");
  std::vector<std::size_t> todo;
  double doneS = 0;
  int done = 0;
  for (std::size_t i = 0; i < states_.size(); ++i) {
    if (states_[i].status == "done") {
      doneS += states_[i].durationS;
      ++done;
    } else {
      todo.push_back(i);
    }
  }
  if (done > 0) {
    fmt::print("resuming: {} of {} configurations already done\n", done, states_.size());
  }
  saveState();
  const auto doneBefore = static_cast<std::size_t>(done);
  for (std::size_t k = 0; k < todo.size(); ++k) {
    runOne(todo[k], doneBefore + k + 1, states_.size(), done > 0 ? doneS / done : 0.0);
    if (states_[todo[k]].status == "done" || states_[todo[k]].status == "failed") {
      doneS += states_[todo[k]].durationS;
      ++done;
    }
  }
  return static_cast<int>(
      std::count_if(states_.begin(), states_.end(), [](const RunState& s) { return s.status == "failed"; }));
}

void ComparisonRunner::predict(const CompareConfiguration& c) {
  const fs::path dir = runDir(c);
  const int status = runStrata(planArguments(c, dir / "plan.json"), dir / "plan.log", [] {});
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fmt::print("  no prediction: {}\n", failureReason(dir / "plan.log", status, "plan"));
  }
}

void ComparisonRunner::runOne(std::size_t index, std::size_t position, std::size_t count, double meanS) {
  const CompareConfiguration& c = configurations_[index];
  RunState& state = states_[index];
  const fs::path dir = runDir(c);
  fs::remove_all(dir);  // what an earlier, unfinished attempt left
  fs::create_directories(dir);
  fmt::print("[{}/{}] {}: {} on {} rank(s)\n", position, count, c.name, c.label, c.worldSize);
  std::fflush(stdout);
  if (options_.predict) {
    predict(c);
  }
  state = RunState(c.name, "running");
  saveState();
  const auto start = std::chrono::steady_clock::now();
  const std::size_t left = count - position;  // after this one
  int ticks = 0;
  const int status = runStrata(trainArguments(c, dir, options_.masterPort), dir / "train.log", [&] {
    if (++ticks % 15 == 0) {
      const double elapsed = since(start);
      const std::string eta =
          meanS > 0 ? fmt::format(", comparison ETA {}", formatDuration(std::max(0.0, meanS - elapsed) + meanS * left))
                    : std::string();
      fmt::print("  ... {}{}\n", formatDuration(elapsed), eta);
      std::fflush(stdout);
    }
  });
  state.durationS = since(start);
  state.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && fs::exists(dir / "summary.json")) {
    state.status = "done";
    fmt::print("  done in {:.1f} s\n", state.durationS);
  } else {
    state.status = "failed";
    state.reason = failureReason(dir / "train.log", status, "train");
    fmt::print("  FAILED after {:.1f} s: {}\n", state.durationS, state.reason);
  }
  std::fflush(stdout);
  saveState();
}

}  // namespace strata::cli
