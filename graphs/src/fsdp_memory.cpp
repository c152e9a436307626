#include "strata/graphs/fsdp_memory.h"

#include <algorithm>
#include <unordered_set>
#include <vector>

#include "strata/error.h"

namespace strata {

// Note [Replaying the FSDP schedule]: the prediction is the plugin's own schedule (plugins/fsdp/fsdp_strategy.cpp)
// run over the plan's steps without computing anything, allocating and freeing what the plugin and the executor
// would, in the same order. Two things are fixed where a run depends on timing: a reduction is taken to finish only
// when the plugin must wait for it (max_inflight reached, or afterBackward), never earlier on its own, so the
// gradient figures are the schedule's worst case; and a collective holds no memory beyond the plugin's padded or
// 16-bit copies and the Gloo ring reduce-scatter's scratch. Kept in step with the plugin by
// multirank.fsdp_memory.*, which compares it with the figures of real runs.

// Note [Scratch until the wait]: when a reduce-scatter's scratch is alive depends on timing: Gloo's worker runs the
// collectives one at a time in their order, and a ring step waits for the slowest rank, so on shared cores the
// bundled CNN's 1.5 MiB reduce-scatter was seen still running 5 ms later, at the backward's activation peak, while
// calibrated on idle threads it takes 0.35 ms. A run's peak over many steps is its worst step, so the total counts
// the scratch beside every node from the launch until the plugin waits for that reduction (the largest pending one:
// only one runs at a time). The categories are unchanged (the scratch counts once, at the launch). Against real runs
// (summary.json's training_memory_at_peak), this is exact in every category on the bundled CNN (2 ranks) and on
// VGG16 (full and grad_op, 2 and 4 ranks), where the two earlier rules were 8% over (the communication peak added to
// the replay's total) and 2-7% under (the scratch beside the one node after the launch).

const char* fsdpLevelName(FsdpLevel level) {
  switch (level) {
    case FsdpLevel::Full:
      return "full";
    case FsdpLevel::GradOp:
      return "grad_op";
    case FsdpLevel::None:
      return "none";
  }
  return "?";
}

FsdpMemoryOptions fsdpMemoryOptions(const std::map<std::string, std::string>& strategyOptions,
                                    FsdpMemoryOptions defaults) {
  FsdpMemoryOptions options = defaults;
  for (const auto& [key, value] : strategyOptions) {
    if (key == "shard") {
      options.level = value == "grad_op" ? FsdpLevel::GradOp : value == "none" ? FsdpLevel::None : FsdpLevel::Full;
    } else if (key == "max_inflight") {
      options.maxInflight = std::stoi(value);
    } else if (key == "accumulate") {
      options.accumulateSharded = value == "sharded";
    } else if (key == "reduce_dtype") {
      options.collectiveElementBytes = value == "bf16" || value == "fp16" ? 2 : 0;
    }
  }
  return options;
}

std::int64_t FsdpMemoryPrediction::modelState() const {
  return peakOf(MemoryCategory::Parameters) + peakOf(MemoryCategory::Gradients) +
         peakOf(MemoryCategory::OptimizerState);
}

namespace {

struct ReplayUnit {
  std::int64_t elements = 0;
  std::int64_t shard = 0;
  std::int64_t elementBytes = 0;
  int firstForward = -1, lastForward = -1, firstBackward = -1, lastBackward = -1;
  int gradientWriters = 0;
  int pending = 0;
  bool reduceLaunched = false;
  bool gathered = false;
  bool gathering = false;
  bool parameters = false;  // the flat parameter buffer is materialised
  bool gradients = false;   // the flat gradient buffer is materialised
  std::int64_t gatherBuffer = 0;
  std::int64_t reduceBuffers = 0;
  std::int64_t scratch = 0;  // the ring reduce-scatter's, from the launch until the plugin waits for it

  std::int64_t fullBytes() const { return elements * elementBytes; }
  std::int64_t shardBytes() const { return shard * elementBytes; }
};

class Replay {
 public:
  Replay(const Program& program, const ParameterGroups& groups, const FsdpMemoryOptions& options)
      : program_(program), groups_(groups), options_(options) {
    STRATA_CHECK(options.ranks >= 1 && options.maxInflight >= 1 && options.microBatches >= 1,
                 "fsdp memory: ranks {}, max_inflight {} and micro-batches {} must be positive", options.ranks,
                 options.maxInflight, options.microBatches);
    sharded_ = options.level != FsdpLevel::None && options.ranks > 1;
    hooked_ = options.ranks > 1;
    for (std::size_t g = 0; g < groups.groupCount(); ++g) {
      const Tensor& flat = groups.flatParameters(g);
      ReplayUnit unit;
      unit.elements = flat.numel();
      unit.shard = (unit.elements + options.ranks - 1) / options.ranks;
      unit.elementBytes = static_cast<std::int64_t>(dtypeSize(flat.dtype()));
      units_.push_back(unit);
      largestUnit_ = std::max(largestUnit_, unit.elements);
    }
    planUnits();
  }

  FsdpMemoryPrediction run() {
    setup();
    peak_ = current_;
    totalPeak_ = total_;
    atTotalPeak_ = current_;
    // Note [Two steps]: the first optimizer step creates optimizers().full() (unsharded levels), so only the
    // second step's forward and backward run beside the optimizer state; the total peak is that step's.
    for (int stepIndex = 0; stepIndex < 2; ++stepIndex) {
      for (int micro = 0; micro < options_.microBatches; ++micro) {
        microBatch(micro);
      }
      if (!sharded_ && stepIndex == 0) {
        allocateFullOptimizer();  // optimizers().full() is created on the first step
      }
    }
    FsdpMemoryPrediction prediction;
    prediction.peak = peak_;
    prediction.totalPeak = totalPeak_;
    prediction.atTotalPeak = atTotalPeak_;
    prediction.units = static_cast<std::int64_t>(units_.size());
    for (const ReplayUnit& unit : units_) {
      prediction.largestUnitElements = std::max(prediction.largestUnitElements, unit.elements);
      prediction.paddingElements += sharded_ ? unit.shard * options_.ranks - unit.elements : 0;
    }
    return prediction;
  }

 private:
  void allocate(MemoryCategory category, std::int64_t bytes) {
    const auto c = static_cast<std::size_t>(category);
    current_[c] += bytes;
    total_ += bytes;
    peak_[c] = std::max(peak_[c], current_[c]);
    raiseTotalPeak();
  }
  void raiseTotalPeak() {
    if (total_ > totalPeak_) {
      totalPeak_ = total_;
      atTotalPeak_ = current_;
      atTotalPeak_[static_cast<std::size_t>(MemoryCategory::Communication)] += scratchBeside_;
    }
  }
  void free(MemoryCategory category, std::int64_t bytes) {
    current_[static_cast<std::size_t>(category)] -= bytes;
    total_ -= bytes;
  }

  bool padded(const ReplayUnit& unit) const { return unit.shard * options_.ranks != unit.elements; }

  ReplayUnit& unitOf(int parameter) { return units_.at(groups_.info(static_cast<std::size_t>(parameter)).group); }

  // The plugin's planUnits: each unit's first and last node per phase, and how many gradients complete it.
  void planUnits() {
    for (std::size_t s = 0; s < program_.steps.size(); ++s) {
      const ProgramStep& step = program_.steps[s];
      const int index = static_cast<int>(s);
      for (int p : step.parametersRead) {
        ReplayUnit& unit = unitOf(p);
        if (step.phase == NodePhase::Backward) {
          unit.firstBackward = unit.firstBackward < 0 ? index : unit.firstBackward;
          unit.lastBackward = index;
        } else {
          unit.firstForward = unit.firstForward < 0 ? index : unit.firstForward;
          unit.lastForward = index;
        }
      }
      for (int p : step.gradientsReady) {
        ++unitOf(p).gradientWriters;
      }
    }
    for (std::size_t u = 0; u < units_.size(); ++u) {
      if (units_[u].firstForward >= 0) {
        forwardOrder_.push_back(u);
      }
      if (units_[u].firstBackward >= 0) {
        backwardOrder_.push_back(u);
      }
    }
    std::sort(forwardOrder_.begin(), forwardOrder_.end(),
              [&](std::size_t a, std::size_t b) { return units_[a].firstForward < units_[b].firstForward; });
    std::sort(backwardOrder_.begin(), backwardOrder_.end(),
              [&](std::size_t a, std::size_t b) { return units_[a].firstBackward < units_[b].firstBackward; });
  }

  // Note [Held constants]: besides the flat buffers, the plan owns Parameters-category tensors of its own: the
  // running statistics it updates in place (BatchNormalization's mean and variance, copied for the plan) and any
  // constant lowered to the plan's device. Each storage counts once; the groups' flat buffers are the units'.
  std::int64_t heldConstantBytes() const {
    std::unordered_set<const Storage*> flat;
    for (std::size_t g = 0; g < groups_.groupCount(); ++g) {
      flat.insert(groups_.flatParameters(g).storage().get());
      flat.insert(groups_.flatGradients(g).storage().get());
    }
    std::unordered_set<const Storage*> counted;
    std::int64_t bytes = 0;
    for (const ProgramValue& value : program_.values) {
      for (const Tensor* t : {&value.constant, &value.bound}) {
        const Storage* storage = t->defined() ? t->storage().get() : nullptr;
        if (storage != nullptr && storage->category() == MemoryCategory::Parameters && !flat.contains(storage) &&
            counted.insert(storage).second) {
          bytes += static_cast<std::int64_t>(storage->bytes());
        }
      }
    }
    return bytes;
  }

  // What is alive when the trainer resets the peaks, after the strategy's setup.
  void setup() {
    allocate(MemoryCategory::Parameters, heldConstantBytes());
    for (ReplayUnit& unit : units_) {
      if (sharded_) {
        allocate(MemoryCategory::Parameters, unit.shardBytes());
        allocate(MemoryCategory::Gradients, unit.shardBytes());
        allocate(MemoryCategory::OptimizerState,
                 static_cast<std::int64_t>(options_.optimizerStates) * unit.shardBytes());
      } else {
        allocate(MemoryCategory::Parameters, unit.fullBytes());
        allocate(MemoryCategory::Gradients, unit.fullBytes());
        unit.parameters = unit.gradients = unit.gathered = true;
      }
    }
  }

  void allocateFullOptimizer() {
    for (const ReplayUnit& unit : units_) {
      allocate(MemoryCategory::OptimizerState, static_cast<std::int64_t>(options_.optimizerStates) * unit.fullBytes());
    }
  }

  std::int64_t collectiveBytes(const ReplayUnit& unit, std::int64_t elements) const {
    const auto bytes = static_cast<std::int64_t>(options_.collectiveElementBytes);
    return elements * (bytes > 0 ? bytes : unit.elementBytes);
  }

  void microBatch(int micro) {
    first_ = micro == 0;
    last_ = micro == options_.microBatches - 1;
    // The trainer's accumulation in place: the executor writes a temporary gradient and adds it into the buffer.
    const bool accumulateInPlace = options_.microBatches > 1 && !options_.accumulateSharded;
    for (ReplayUnit& unit : units_) {
      unit.pending = unit.gradientWriters;
      unit.reduceLaunched = false;
    }
    std::int64_t live = 0;
    for (std::size_t s = 0; s < program_.steps.size(); ++s) {
      const ProgramStep& step = program_.steps[s];
      if (sharded_) {
        beforeNode(step);
      }
      holdScratchBesideNode();
      std::int64_t temporaries = 0;
      for (int v : step.outputs) {
        if (v < 0) {
          continue;
        }
        const ProgramValue& value = program_.values[static_cast<std::size_t>(v)];
        const auto bytes = static_cast<std::int64_t>(value.meta.bytes());
        if (!value.bound.defined()) {
          const std::int64_t owned = storageBytes(value);  // Note [Views without copies]
          allocate(MemoryCategory::Activations, owned);
          live += owned;
        } else if (accumulateInPlace && value.gradient) {
          allocate(MemoryCategory::Gradients, bytes);
          temporaries += bytes;
        }
      }
      free(MemoryCategory::Gradients, temporaries);
      total_ -= scratchBeside_;
      scratchBeside_ = 0;
      for (int v : step.releaseAfter) {
        const std::int64_t bytes = storageBytes(program_.values[static_cast<std::size_t>(v)]);
        free(MemoryCategory::Activations, bytes);
        live -= bytes;
      }
      if (sharded_) {
        afterNode(static_cast<int>(s));
      }
      if (hooked_) {
        for (int p : step.gradientsReady) {
          gradientReady(p);
        }
      }
    }
    free(MemoryCategory::Activations, live);  // the step's outputs, dropped before the next micro-batch
    if (hooked_) {
      afterBackward();
    }
  }

  void beforeNode(const ProgramStep& step) {
    for (int p : step.gradientsReady) {
      ensureGradientBuffer(unitOf(p));
    }
    for (int p : step.parametersRead) {
      ReplayUnit& unit = unitOf(p);
      if (!unit.gathered) {
        launchGather(unit);
        finishGather(unit);
      }
      prefetchAfter(unit, step.phase == NodePhase::Backward);
    }
  }

  void afterNode(int index) {
    for (ReplayUnit& unit : units_) {
      const bool lastForwardUse = unit.lastForward == index;
      const bool lastUse = unit.lastBackward == index || (lastForwardUse && unit.lastBackward < 0);
      if (lastUse || (lastForwardUse && options_.level == FsdpLevel::Full)) {
        releaseParameters(unit);
      }
    }
  }

  void launchGather(ReplayUnit& unit) {
    if (unit.gathered || unit.gathering) {
      return;
    }
    if (!unit.parameters) {
      allocate(MemoryCategory::Parameters, unit.fullBytes());
      unit.parameters = true;
    }
    // reduce_dtype: the shard rounded to 16 bits; then the destination, padded or in 16 bits.
    const bool sixteenBit = options_.collectiveElementBytes > 0;
    if (sixteenBit) {
      unit.gatherBuffer += collectiveBytes(unit, unit.shard);
      allocate(MemoryCategory::Communication, collectiveBytes(unit, unit.shard));
    }
    if (padded(unit) || sixteenBit) {
      unit.gatherBuffer += collectiveBytes(unit, unit.shard * options_.ranks);
      allocate(MemoryCategory::Communication, collectiveBytes(unit, unit.shard * options_.ranks));
    }
    unit.gathering = true;
  }

  void finishGather(ReplayUnit& unit) {
    free(MemoryCategory::Communication, unit.gatherBuffer);
    unit.gatherBuffer = 0;
    unit.gathering = false;
    unit.gathered = true;
  }

  // The plugin's prefetchAfter (Note [Gather budget] in plugins/fsdp/fsdp_strategy.cpp).
  void prefetchAfter(const ReplayUnit& unit, bool backward) {
    const std::vector<std::size_t>& order = backward ? backwardOrder_ : forwardOrder_;
    const auto at = std::find_if(order.begin(), order.end(), [&](std::size_t u) { return &units_[u] == &unit; });
    int inflight = 0;
    std::int64_t held = 0;
    for (const ReplayUnit& u : units_) {
      inflight += u.gathering ? 1 : 0;
      held += u.gathered || u.gathering ? u.elements : 0;
    }
    const bool budgeted = options_.level == FsdpLevel::Full;
    for (auto next = at == order.end() ? at : at + 1; next != order.end() && inflight < options_.maxInflight; ++next) {
      ReplayUnit& candidate = units_[*next];
      if (candidate.gathered || candidate.gathering) {
        continue;
      }
      if (budgeted && held + candidate.elements > 2 * largestUnit_) {
        break;
      }
      launchGather(candidate);
      ++inflight;
      held += candidate.elements;
    }
  }

  void releaseParameters(ReplayUnit& unit) {
    if (unit.gathering) {
      finishGather(unit);
    }
    if (unit.parameters) {
      free(MemoryCategory::Parameters, unit.fullBytes());
      unit.parameters = false;
    }
    unit.gathered = false;
  }

  void ensureGradientBuffer(ReplayUnit& unit) {
    if (!unit.gradients) {
      if (options_.level == FsdpLevel::Full && sharded_) {
        makeRoomForGradients(unit);
      }
      allocate(MemoryCategory::Gradients, unit.fullBytes());
      unit.gradients = true;
    }
  }

  // The plugin's makeRoomForGradients: the oldest reductions finish until the unit's gradients fit the budget.
  void makeRoomForGradients(const ReplayUnit& unit) {
    std::int64_t held = 0;
    for (const ReplayUnit& u : units_) {
      held += u.gradients ? u.elements : 0;
    }
    while (!reducing_.empty() && held + unit.elements > 2 * largestUnit_) {
      ReplayUnit& oldest = units_[reducing_.front()];
      reducing_.erase(reducing_.begin());
      finishReduce(oldest);
      held -= oldest.elements;
    }
  }

  void gradientReady(int parameter) {
    ReplayUnit& unit = unitOf(parameter);
    if (--unit.pending > 0) {
      return;
    }
    if (last_ || options_.accumulateSharded) {
      launchReduce(unit);
    }
  }

  void retireReductions(bool all) {
    while (!reducing_.empty()) {
      const bool overLimit = static_cast<int>(reducing_.size()) >= options_.maxInflight;
      if (!all && !overLimit) {
        return;  // Note [Replaying the FSDP schedule]: not finished before the plugin must wait for it
      }
      ReplayUnit& oldest = units_[reducing_.front()];
      reducing_.erase(reducing_.begin());
      finishReduce(oldest);
    }
  }

  void launchReduce(ReplayUnit& unit) {
    retireReductions(false);
    reducing_.push_back(static_cast<std::size_t>(&unit - units_.data()));
    unit.reduceLaunched = true;
    if (!sharded_) {
      // An all-reduce in place, or in a 16-bit copy of the whole unit.
      unit.reduceBuffers = options_.collectiveElementBytes > 0 ? collectiveBytes(unit, unit.elements) : 0;
      allocate(MemoryCategory::Communication, unit.reduceBuffers);
      return;
    }
    // A padded (or 16-bit) copy of the gradients to reduce-scatter from, and the shard it lands in when it is added
    // into the local shard afterwards.
    if (padded(unit) || options_.collectiveElementBytes > 0) {
      unit.reduceBuffers += collectiveBytes(unit, unit.shard * options_.ranks);
    }
    if ((options_.accumulateSharded && !first_) || options_.collectiveElementBytes > 0) {
      unit.reduceBuffers += collectiveBytes(unit, unit.shard);
    }
    allocate(MemoryCategory::Communication, unit.reduceBuffers);
    // Gloo's ring reduce-scatter holds two parts of scratch while it runs (Note [ring reduce-scatter]); its worker
    // runs one collective at a time, so this is counted once, at the launch.
    const std::int64_t scratch = collectiveBytes(unit, 2 * unit.shard);
    allocate(MemoryCategory::Communication, scratch);
    free(MemoryCategory::Communication, scratch);
    unit.scratch = scratch;
  }

  // Note [Scratch until the wait]: counted in the total beside a node while any reduction the plugin has not waited
  // for yet holds it (the largest: the worker runs one at a time).
  void holdScratchBesideNode() {
    for (const ReplayUnit& unit : units_) {
      scratchBeside_ = std::max(scratchBeside_, unit.scratch);
    }
    total_ += scratchBeside_;
    raiseTotalPeak();
  }

  void finishReduce(ReplayUnit& unit) {
    unit.scratch = 0;
    free(MemoryCategory::Communication, unit.reduceBuffers);
    unit.reduceBuffers = 0;
    if (sharded_ && unit.gradients) {
      free(MemoryCategory::Gradients, unit.fullBytes());
      unit.gradients = false;
    }
  }

  void afterBackward() {
    if (!(last_ || (sharded_ && options_.accumulateSharded))) {
      return;
    }
    for (ReplayUnit& unit : units_) {
      if (unit.reduceLaunched) {
        continue;
      }
      ensureGradientBuffer(unit);
      launchReduce(unit);
    }
    retireReductions(true);
    if (sharded_) {
      for (ReplayUnit& unit : units_) {
        releaseParameters(unit);
      }
    }
  }

  const Program& program_;
  const ParameterGroups& groups_;
  FsdpMemoryOptions options_;
  bool sharded_ = false;
  bool hooked_ = false;
  bool first_ = true;
  bool last_ = true;
  std::vector<ReplayUnit> units_;
  std::vector<std::size_t> forwardOrder_;
  std::vector<std::size_t> backwardOrder_;
  std::vector<std::size_t> reducing_;
  std::int64_t largestUnit_ = 0;  // elements
  std::array<std::int64_t, kMemoryCategoryCount> current_{};
  std::array<std::int64_t, kMemoryCategoryCount> peak_{};
  std::int64_t total_ = 0;
  std::int64_t totalPeak_ = 0;
  std::array<std::int64_t, kMemoryCategoryCount> atTotalPeak_{};
  std::int64_t scratchBeside_ = 0;  // Note [Scratch until the wait]
};

}  // namespace

FsdpMemoryPrediction predictFsdpMemory(const Program& program, const ParameterGroups& groups,
                                       const FsdpMemoryOptions& options) {
  return Replay(program, groups, options).run();
}

}  // namespace strata
