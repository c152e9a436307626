#include "plan/plan_calibration.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <spdlog/spdlog.h>

#include "strata/allocator.h"
#include "strata/comm/gloo_process_group.h"
#include "strata/comm/in_memory_store.h"
#include "strata/error.h"

namespace strata::cli {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  if (values.empty()) {
    return 0;
  }
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Deterministic inputs in [-1, 1) and labels 0..classes-1 (timing does not depend on the values).
Tensor syntheticTensor(const TensorMeta& meta, std::int64_t classes) {
  Tensor t = Tensor::empty(meta, MemoryCategory::Other);
  std::uint32_t state = 12345;
  const auto next = [&] {
    state = state * 1664525U + 1013904223U;
    return state >> 8;
  };
  if (meta.dtype == DType::Int64) {
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      t.data<std::int64_t>()[i] = static_cast<std::int64_t>(next() % static_cast<std::uint32_t>(classes));
    }
  } else {
    STRATA_CHECK(meta.dtype == DType::Float32, "plan calibration: inputs of dtype {} are not supported",
                 dtypeName(meta.dtype));
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      t.data<float>()[i] = static_cast<float>(next() % 65536U) / 32768.0F - 1.0F;
    }
  }
  return t;
}

// Note [Collective fit]: latency from the small size, bandwidth from the large one beyond that latency. On a
// loaded machine the small size's median can exceed the large one's; the bandwidth is then the large size over its
// whole time (latency included), which overestimates the cost of large collectives rather than calling them free.
CollectiveFit fit(double smallS, double largeS, std::int64_t smallBytes, std::int64_t largeBytes) {
  CollectiveFit f;
  f.latencyS = smallS;
  const double beyond = largeS - smallS;
  f.bytesPerS = beyond > 0.1 * largeS ? static_cast<double>(largeBytes - smallBytes) / beyond
                                      : static_cast<double>(largeBytes) / std::max(largeS, 1e-9);
  if (beyond <= 0.1 * largeS) {
    f.latencyS = 0;
  }
  return f;
}

}  // namespace

ConcurrentRanks::ConcurrentRanks(int copies, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/proc/self/exe"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> pointers;
  for (std::string& arg : argv) {
    pointers.push_back(arg.data());
  }
  pointers.push_back(nullptr);
  for (int i = 0; i < copies; ++i) {
    pid_t pid = 0;
    const int status = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, pointers.data(), environ);
    if (status != 0) {
      spdlog::warn("plan: cannot start a concurrent calibration rank ({}); the compute is measured alone",
                   std::strerror(status));
      return;
    }
    pids_.push_back(pid);
  }
}

ConcurrentRanks::~ConcurrentRanks() {
  for (int pid : pids_) {
    ::kill(pid, SIGTERM);
  }
  for (int pid : pids_) {
    int status = 0;
    ::waitpid(pid, &status, 0);
  }
}

double CollectiveFit::seconds(std::int64_t bytes) const {
  return latencyS + (bytesPerS > 0 ? static_cast<double>(bytes) / bytesPerS : 0.0);
}

ComputeCalibration calibrateCompute(TrainingPlan& plan, const std::vector<TensorMeta>& inputMetas,
                                    const OptimizerOptions& optimizerOptions, int steps) {
  std::vector<Tensor> inputs;
  for (const TensorMeta& meta : inputMetas) {
    inputs.push_back(syntheticTensor(meta, 1));
  }
  const Tensor labels = syntheticTensor(plan.labelMeta(), 1);  // class 0 everywhere: the time is the same
  Optimizer optimizer(plan.parameters(), optimizerOptions);
  MemoryStats& stats = allocatorFor(plan.parameters().device()).stats();
  stats.resetPeaks();
  const int warmup = steps > 0 ? 2 : 1;
  std::vector<double> computeTimes;
  std::vector<double> optimizerTimes;
  for (int s = 0; s < warmup + steps; ++s) {
    const Clock::time_point start = Clock::now();
    plan.parameters().zeroGradients();
    plan.step(inputs, labels);
    const Clock::time_point computed = Clock::now();
    optimizer.step(1e-6);
    if (s >= warmup) {
      computeTimes.push_back(std::chrono::duration<double>(computed - start).count());
      optimizerTimes.push_back(secondsSince(computed));
    }
  }
  ComputeCalibration result;
  result.steps = steps;
  result.forwardBackwardS = median(computeTimes);
  result.optimizerS = median(optimizerTimes);
  // What a run's peak sees: the workspace already alive when the trainer resets the peaks, and the steps'.
  result.workspaceBytes = stats.snapshot().peak[static_cast<std::size_t>(MemoryCategory::Workspace)];
  return result;
}

CollectiveCalibration calibrateCollectives(int ranks, std::int64_t largeBytes, int repeats) {
  CollectiveCalibration result;
  result.ranks = ranks;
  if (ranks <= 1) {
    return result;  // no collectives: every fit is 0 s
  }
  // Sizes divisible by ranks x 4 bytes, so reduce-scatter and all-gather parts are whole float32 elements.
  const std::int64_t granule = 4LL * ranks;
  result.smallBytes = granule * std::max<std::int64_t>(1, 4096 / granule);
  result.largeBytes = granule * std::max<std::int64_t>(2 * result.smallBytes / granule, largeBytes / granule);
  // Per collective, per size, rank 0's median seconds.
  std::vector<double> measured(6, 0.0);
  auto store = std::make_shared<InMemoryStore>();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        GlooOptions gloo;
        gloo.groupName = "plan_calibration";
        GlooProcessGroup group(store, r, ranks, ProcessGroupOptions{std::chrono::minutes(2)}, gloo);
        const auto timeout = std::chrono::minutes(2);
        const std::int64_t sizes[2] = {result.smallBytes, result.largeBytes};
        for (int kind = 0; kind < 3; ++kind) {
          for (int which = 0; which < 2; ++which) {
            const std::int64_t elements = sizes[which] / 4;
            Tensor full = Tensor::zeros(DType::Float32, {elements}, MemoryCategory::Communication);
            Tensor part = Tensor::zeros(DType::Float32, {elements / ranks}, MemoryCategory::Communication);
            std::vector<double> times;
            const int runs = which == 0 ? 3 * repeats : repeats;  // small ones are cheap and noisier
            for (int i = 0; i < runs + 1; ++i) {
              group.barrier()->wait(timeout);
              const Clock::time_point start = Clock::now();
              WorkHandle work = kind == 0   ? group.allReduce(full, ReduceOp::Sum)
                                : kind == 1 ? group.allGather(part, full)
                                            : group.reduceScatter(full, part, ReduceOp::Average);
              work->wait(timeout);
              if (i > 0) {
                times.push_back(secondsSince(start));  // the first run is a warm-up
              }
            }
            if (r == 0) {
              measured[static_cast<std::size_t>(2 * kind + which)] = median(times);
            }
          }
        }
        group.barrier()->wait(timeout);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  for (const std::exception_ptr& error : errors) {
    if (error) {
      std::rethrow_exception(error);
    }
  }
  result.measuredS = measured;
  result.allReduce = fit(measured[0], measured[1], result.smallBytes, result.largeBytes);
  result.allGather = fit(measured[2], measured[3], result.smallBytes, result.largeBytes);
  result.reduceScatter = fit(measured[4], measured[5], result.smallBytes, result.largeBytes);
  return result;
}

}  // namespace strata::cli
