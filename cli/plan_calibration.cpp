#include "plan_calibration.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

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

CollectiveFit fit(double smallS, double largeS, std::int64_t smallBytes, std::int64_t largeBytes) {
  CollectiveFit f;
  const double slope = std::max((largeS - smallS) / static_cast<double>(largeBytes - smallBytes), 1e-15);
  f.bytesPerS = 1.0 / slope;
  f.latencyS = std::max(0.0, smallS - slope * static_cast<double>(smallBytes));
  return f;
}

}  // namespace

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
  const std::int64_t workspaceBefore = stats.snapshot().current[static_cast<std::size_t>(MemoryCategory::Workspace)];
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
  result.workspaceBytes = stats.snapshot().peak[static_cast<std::size_t>(MemoryCategory::Workspace)] - workspaceBefore;
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
            for (int i = 0; i < repeats + 1; ++i) {
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
  result.allReduce = fit(measured[0], measured[1], result.smallBytes, result.largeBytes);
  result.allGather = fit(measured[2], measured[3], result.smallBytes, result.largeBytes);
  result.reduceScatter = fit(measured[4], measured[5], result.smallBytes, result.largeBytes);
  return result;
}

}  // namespace strata::cli
