#include "launch/child_process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "strata/error.h"

namespace strata::cli::detail {

std::string describeChild(const ChildProcess& child) {
  return child.role ? "role " + child.label : child.label;
}

std::string describeWaitStatus(int status) {
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

// Note [launcher fork]: everything the child needs (argv, envp) is built before fork; between fork and exec
// the child calls only async-signal-safe functions. PR_SET_PDEATHSIG fires when the forking *thread* exits,
// which is the launcher's thread, alive until every child is reaped; the getppid check covers a launcher that died
// before the prctl. All pipe ends are O_CLOEXEC, so no child holds another child's pipe open and EOF means exit.
void spawnChild(ChildProcess& child, const sigset_t& childSignalMask) {
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
    fail("cannot create a pipe for {}: {}", describeChild(child), std::strerror(errno));
  }
  if (::pipe2(errPipe, O_CLOEXEC) != 0) {
    const int error = errno;
    ::close(outPipe[0]);
    ::close(outPipe[1]);
    fail("cannot create a pipe for {}: {}", describeChild(child), std::strerror(error));
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
    pthread_sigmask(SIG_SETMASK, &childSignalMask, nullptr);
    ::execve("/proc/self/exe", argv.data(), envp.data());
    static constexpr char kMessage[] = "strata: cannot execute /proc/self/exe for a rank or role\n";
    [[maybe_unused]] const ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
    ::_exit(127);
  }
  const int forkError = errno;
  ::close(outPipe[1]);
  ::close(errPipe[1]);
  child.out = ChildStream{outPipe[0], STDOUT_FILENO, {}};
  child.err = ChildStream{errPipe[0], STDERR_FILENO, {}};
  if (pid < 0) {
    fail("cannot start {}: fork failed: {}", describeChild(child), std::strerror(forkError));
  }
  child.pid = pid;
  child.running = true;
  ::fcntl(child.out.fd, F_SETFL, O_NONBLOCK);
  ::fcntl(child.err.fd, F_SETFL, O_NONBLOCK);
}

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

}  // namespace strata::cli::detail
