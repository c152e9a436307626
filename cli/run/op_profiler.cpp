#include "run/op_profiler.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace strata::cli {
namespace {

const char* phaseName(NodePhase phase) {
  switch (phase) {
    case NodePhase::Forward:
      return "forward";
    case NodePhase::Loss:
      return "loss";
    case NodePhase::Backward:
      return "backward";
  }
  return "?";
}

std::string implementationOf(const ProgramStep& step) {
  return step.kernel != nullptr ? step.kernel->implementation() : std::string();
}

}  // namespace

OpProfiler::OpProfiler(Executor& executor, int warmupRuns)
    : executor_(executor),
      nodeMs_(executor.program().steps.size(), 0.0),
      countFrom_(executor.runCount() + static_cast<std::uint64_t>(std::max(warmupRuns, 0))) {
  Stream& stream = defaultStream(executor.device());
  hookIds_.push_back(executor.addBeforeNodeHook([this, &stream](const NodeEvent& e) {
    // The executor counts a run before its first node: the first counted run starts with the count at countFrom_+1.
    if (e.stepIndex == 0 && executor_.runCount() == countFrom_ + 1)
      std::fill(nodeMs_.begin(), nodeMs_.end(), 0.0);
    stream.synchronize();
    start_ = std::chrono::steady_clock::now();
  }));
  hookIds_.push_back(executor.addAfterNodeHook([this, &stream](const NodeEvent& e) {
    stream.synchronize();
    nodeMs_[e.stepIndex] +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  }));
}

OpProfiler::~OpProfiler() {
  for (int id : hookIds_)
    executor_.removeHook(id);
}

void OpProfiler::print(int topNodes) const {
  const std::uint64_t counted = executor_.runCount() > countFrom_ ? executor_.runCount() - countFrom_ : 0;
  if (counted == 0) {
    fmt::print("profile: no run after the warm-up\n");
    return;
  }
  const auto runs = static_cast<double>(counted);
  const std::vector<ProgramStep>& steps = executor_.program().steps;
  const bool training = executor_.program().training;
  const double total = std::accumulate(nodeMs_.begin(), nodeMs_.end(), 0.0) / runs;

  // By (phase, op type) in a training plan, by op type otherwise.
  struct Group {
    double ms = 0;
    int nodes = 0;
    std::map<std::string, int> implementations;
  };
  std::map<std::string, Group> groups;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const std::string key =
        training ? fmt::format("{} {}", phaseName(steps[i].phase), steps[i].opType) : steps[i].opType;
    Group& group = groups[key];
    group.ms += nodeMs_[i] / runs;
    ++group.nodes;
    if (std::string implementation = implementationOf(steps[i]); !implementation.empty())
      ++group.implementations[implementation];
  }
  std::vector<std::pair<double, std::string>> rows;
  for (const auto& [key, group] : groups)
    rows.emplace_back(group.ms, key);
  std::sort(rows.rbegin(), rows.rend());
  fmt::print("profile (ms per run, {} runs, {:.3f} ms in nodes):\n", runs, total);
  for (const auto& [ms, key] : rows) {
    const Group& group = groups.at(key);
    fmt::print("  {:<32} {:>9.3f}  {:>5.1f}%  ({} nodes)\n", key, ms, total > 0 ? 100.0 * ms / total : 0.0,
               group.nodes);
    for (const auto& [implementation, count] : group.implementations)
      fmt::print("      {} ({} nodes)\n", implementation, count);
  }
  if (topNodes <= 0)
    return;
  std::vector<std::size_t> order(steps.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return nodeMs_[a] > nodeMs_[b]; });
  order.resize(std::min<std::size_t>(order.size(), static_cast<std::size_t>(topNodes)));
  fmt::print("slowest nodes (ms per run):\n");
  for (std::size_t i : order) {
    fmt::print("  {:>9.3f}  {} {} '{}'  {}\n", nodeMs_[i] / runs, phaseName(steps[i].phase), steps[i].opType,
               steps[i].nodeName, implementationOf(steps[i]));
  }
}

}  // namespace strata::cli
