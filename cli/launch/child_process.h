#pragma once

// A rank or a role process the launcher starts as a copy of this binary (/proc/self/exe), with its output on pipes
// (child_output.h), and what it needs to be started again.

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "launch/child_output.h"

namespace strata::cli::detail {

struct ChildProcess {
  std::string label;  // "rank 3" or "echo-server 1": the output prefix, and the name in messages
  bool role = false;
  pid_t pid = -1;
  bool running = false;
  int status = 0;  // waitpid's, once it has exited
  ChildStream out;
  ChildStream err;
  // For restarting a rank or role that may be restarted (LaunchOptions::maxRestarts, RoleRequest::maxRestarts).
  std::vector<std::string> args;
  std::vector<std::string> env;
  int restartsLeft = 0;
  int restarts = 0;
  int rank = -1;  // a rank's global rank
};

// A child as messages name it: "rank 3" or "role echo-server 1".
std::string describeChild(const ChildProcess& child);

// A wait status in words: "exited with status 3", "was killed by signal 9 (SIGKILL)".
std::string describeWaitStatus(int status);

// Forks and executes /proc/self/exe with the child's args and env (and STRATA_RANK_RESTARTS or STRATA_ROLE_RESTARTS
// once restarted), its stdout and stderr on fresh non-blocking pipes; the child restores `childSignalMask` before
// exec. Sets pid and running; throws Error when a pipe or the fork fails.
void spawnChild(ChildProcess& child, const sigset_t& childSignalMask);

// This process's own argv (/proc/self/cmdline), to repeat for each rank.
std::vector<std::string> ownCommandLine();

}  // namespace strata::cli::detail
