#include "strata/thread_names.h"

#include <pthread.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace strata {
namespace {

constexpr std::size_t kMaxThreadName = 15;  // TASK_COMM_LEN - 1

// utime + stime (clock ticks) from a /proc/<pid>/task/<tid>/stat line; the name field before them is in
// parentheses and may hold spaces, so the fields are counted after its closing parenthesis.
long long ticksOf(const std::string& statLine) {
  const std::size_t close = statLine.rfind(')');
  if (close == std::string::npos) {
    return 0;
  }
  std::istringstream fields(statLine.substr(close + 1));
  std::string field;
  // After the name: state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime(14) stime(15).
  for (int i = 3; i <= 13 && fields >> field; ++i) {
  }
  long long utime = 0;
  long long stime = 0;
  if (!(fields >> utime >> stime)) {
    return 0;
  }
  return utime + stime;
}

}  // namespace

void nameThisThread(std::string_view name) {
  const std::string truncated(name.substr(0, kMaxThreadName));
  pthread_setname_np(pthread_self(), truncated.c_str());
}

double cpuSecondsOfThreadsNamed(std::string_view prefix) {
  const std::string wanted(prefix.substr(0, kMaxThreadName));
  long long ticks = 0;
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", error)) {
    std::ifstream commFile(task.path() / "comm");
    std::string comm;
    if (!std::getline(commFile, comm) || !comm.starts_with(wanted)) {
      continue;
    }
    std::ifstream statFile(task.path() / "stat");
    const std::string stat((std::istreambuf_iterator<char>(statFile)), std::istreambuf_iterator<char>());
    ticks += ticksOf(stat);  // a thread that exited meanwhile reads as empty: 0
  }
  const long ticksPerSecond = sysconf(_SC_CLK_TCK);
  return ticksPerSecond > 0 ? static_cast<double>(ticks) / static_cast<double>(ticksPerSecond) : 0.0;
}

}  // namespace strata
