#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "strata/executor.h"

namespace strata::cli {

// Wall time per op type across an executor's runs, from its node hooks (`strata run --profile`, `strata train
// --profile`), with the implementation each node ran (Note [Layout detours]) so that reference kernels show, and the
// slowest nodes. On a GPU each node is synchronised before and after, so the times are the kernels' own (and the
// total is slower than an unprofiled run). Removes its hooks when destroyed.
class OpProfiler {
 public:
  // The first `warmupRuns` runs are not counted (kernels finish lazy setup in their first run).
  explicit OpProfiler(Executor& executor, int warmupRuns = 0);
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  // Prints the time per run by op type (forward and backward apart in a training plan) and the `topNodes` slowest
  // nodes, averaged over the executor's runs since the last reset.
  void print(int topNodes = 0) const;

 private:
  Executor& executor_;
  std::vector<int> hookIds_;
  std::chrono::steady_clock::time_point start_;
  std::vector<double> nodeMs_;   // by plan step, summed over runs
  std::uint64_t countFrom_ = 0;  // the executor's run count before the first counted run
};

}  // namespace strata::cli
