// FSDP: fully sharded data parallel over the SDK's parameter units (Note [FSDP schedule] in fsdp_strategy.h).
#include "fsdp_strategy.h"

#include <algorithm>

#include "strata/error.h"

namespace strata::plugins::fsdp {
namespace {

// Adds `part` into `sum` (host tensors, float32 or float64): sharded accumulation on the CPU.
void addInto(const Tensor& sum, const Tensor& part) {
  if (sum.dtype() == DType::Float64) {
    for (std::int64_t i = 0; i < sum.numel(); ++i) {
      sum.data<double>()[i] += part.data<double>()[i];
    }
  } else {
    for (std::int64_t i = 0; i < sum.numel(); ++i) {
      sum.data<float>()[i] += part.data<float>()[i];
    }
  }
}

}  // namespace

double FsdpStrategy::seconds(std::chrono::steady_clock::duration d) const {
  return std::chrono::duration<double>(d).count();
}

StrategyRequirements FsdpStrategy::requirements(const StrategyQuery& query) {
  const FsdpOptions options = parseFsdpOptions(query.options);
  StrategyRequirements requirements;
  requirements.units = options.unitsByModule ? UnitPartition{UnitPartition::Kind::ByModule, 0}
                                             : UnitPartition{UnitPartition::Kind::ByParameterCount, options.unitParams};
  requirements.accumulation =
      options.accumulate == AccumulateIn::Sharded ? Accumulation::ByStrategy : Accumulation::InPlace;
  return requirements;
}

void FsdpStrategy::setup(StrategyContext& context) {
  context_ = &context;
  options_ = parseFsdpOptions(context.options());
  timeout_ = options_.timeout.count() > 0 ? options_.timeout : context.timeout();
  group_ = context.processGroup();
  rank_ = context.rank();
  ranks_ = group_ != nullptr ? group_->size() : 1;
  if (options_.accumulate == AccumulateIn::Sharded && options_.level == ShardLevel::None) {
    fail("fsdp: accumulate=sharded needs shard=full or shard=grad_op (shard=none keeps full gradients)");
  }
  if (options_.accumulate == AccumulateIn::Sharded && context.parameters().device().type != DeviceType::CPU) {
    fail("fsdp: accumulate=sharded adds shards on the host and runs on the CPU only; use accumulate=local on {}",
         context.parameters().device().toString());
  }
  if (ranks_ == 1) {
    return;  // one process: nothing to shard or reduce; the full optimizer steps (see step)
  }
  broadcastInitialState();
  planUnits();
  if (sharded()) {
    createShards();
    hooks_.push_back(context.hooks().beforeNode([this](const NodeInfo& node) { beforeNode(node); }));
    hooks_.push_back(context.hooks().afterNode([this](const NodeInfo& node) { afterNode(node); }));
  }
  hooks_.push_back(context.hooks().gradientReady([this](int parameter) { onGradientReady(parameter); }));
}

// Every rank starts from rank 0's parameters and buffers, as under DDP.
void FsdpStrategy::broadcastInitialState() {
  ParameterGroups& store = context_->parameters();
  std::vector<WorkHandle> works;
  for (std::size_t g = 0; g < store.groupCount(); ++g) {
    works.push_back(group_->broadcast(store.flatParameters(g), 0));
  }
  for (const Tensor& buffer : context_->buffers()) {
    works.push_back(group_->broadcast(buffer, 0));
  }
  for (const WorkHandle& work : works) {
    work->wait(timeout_);
  }
  store.bumpVersion();
}

void FsdpStrategy::planUnits() {
  ParameterGroups& store = context_->parameters();
  units_.assign(store.groupCount(), Unit{});
  for (std::size_t g = 0; g < store.groupCount(); ++g) {
    Unit& unit = units_[g];
    unit.group = g;
    unit.elements = store.flatParameters(g).numel();
    unit.shard = (unit.elements + ranks_ - 1) / ranks_;
  }
  Hooks& hooks = context_->hooks();
  for (std::size_t i = 0; i < hooks.nodeCount(); ++i) {
    const NodeInfo node = hooks.node(i);
    const int index = static_cast<int>(i);
    for (int p : node.parameters) {
      Unit& unit = unitOfParameter(p);
      if (node.phase == NodePhase::Backward) {
        unit.firstBackward = unit.firstBackward < 0 ? index : unit.firstBackward;
        unit.lastBackward = index;
      } else {
        unit.firstForward = unit.firstForward < 0 ? index : unit.firstForward;
        unit.lastForward = index;
      }
    }
    for (int p : node.gradientsFinal) {
      ++unitOfParameter(p).gradientWriters;
    }
  }
  forwardOrder_.clear();
  backwardOrder_.clear();
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

void FsdpStrategy::createShards() {
  ParameterGroups& store = context_->parameters();
  std::vector<ParameterSlice> slices;
  for (Unit& unit : units_) {
    const Tensor& flat = store.flatParameters(unit.group);
    unit.shardParameters = Tensor::zeros(flat.dtype(), {unit.shard}, MemoryCategory::Parameters, flat.device());
    unit.shardGradients = Tensor::zeros(flat.dtype(), {unit.shard}, MemoryCategory::Gradients, flat.device());
    const std::int64_t begin = rank_ * unit.shard;
    const std::int64_t count = std::clamp<std::int64_t>(unit.elements - begin, 0, unit.shard);
    if (count > 0) {
      unit.shardParameters.flatSlice(0, count).copyFrom(flat.flatSlice(begin, count));
    }
    slices.push_back(ParameterSlice{unit.shardParameters, unit.shardGradients});
  }
  shardOptimizer_ = context_->optimizers().create(std::move(slices));
  // What the memory bound depends on (docs/plugins.md): the largest unit, and the zeros that pad the shards.
  std::int64_t largest = 0;
  std::int64_t padding = 0;
  for (const Unit& unit : units_) {
    largest = std::max(largest, unit.elements);
    padding += unit.shard * ranks_ - unit.elements;
  }
  context_->addFigure("fsdp_units", static_cast<double>(units_.size()));
  context_->addFigure("fsdp_largest_unit_elements", static_cast<double>(largest));
  context_->addFigure("fsdp_padding_elements", static_cast<double>(padding));
  for (Unit& unit : units_) {
    store.releaseParameters(unit.group);
    store.releaseGradients(unit.group);
    unit.gathered = false;
  }
}

Unit& FsdpStrategy::unitOfParameter(int parameter) {
  return units_.at(context_->parameters().info(static_cast<std::size_t>(parameter)).group);
}

void FsdpStrategy::beforeForward(const StepInfo& at) {
  at_ = at;
  for (Unit& unit : units_) {
    unit.pending = unit.gradientWriters;  // this micro-batch's backward finalises them again
    unit.reduceLaunched = false;
  }
}

void FsdpStrategy::beforeNode(const NodeInfo& node) {
  for (int p : node.gradientsFinal) {
    ensureGradientBuffer(unitOfParameter(p));
  }
  for (int p : node.parameters) {
    Unit& unit = unitOfParameter(p);
    ensureGathered(unit);
    prefetchAfter(unit, node.phase == NodePhase::Backward);
  }
}

void FsdpStrategy::afterNode(const NodeInfo& node) {
  const int index = static_cast<int>(node.index);
  for (Unit& unit : units_) {
    const bool lastForwardUse = unit.lastForward == index;
    const bool lastUse = unit.lastBackward == index || (lastForwardUse && unit.lastBackward < 0);
    // shard=full frees a unit between its forward and its backward; grad_op keeps it until its last backward node.
    if (lastUse || (lastForwardUse && options_.level == ShardLevel::Full)) {
      releaseParameters(unit);
    }
  }
}

void FsdpStrategy::launchGather(Unit& unit) {
  if (unit.gathered || unit.gather) {
    return;
  }
  ParameterGroups& store = context_->parameters();
  store.materializeParameters(unit.group);
  Tensor destination = store.flatParameters(unit.group);
  if (unit.shard * ranks_ != unit.elements) {
    unit.gatherBuffer =
        Tensor::empty(destination.dtype(), {unit.shard * ranks_}, MemoryCategory::Communication, destination.device());
    destination = unit.gatherBuffer;
  }
  unit.gather = group_->allGather(unit.shardParameters, destination);
}

void FsdpStrategy::finishGather(Unit& unit) {
  const auto start = std::chrono::steady_clock::now();
  unit.gather->wait(timeout_);
  gatherWaitS_ += seconds(std::chrono::steady_clock::now() - start);
  context_->addFigure("collective_s", unit.gather->runSeconds());
  context_->addFigure("all_gather_s", unit.gather->runSeconds());
  if (unit.gatherBuffer.defined()) {
    Tensor(context_->parameters().flatParameters(unit.group)).copyFrom(unit.gatherBuffer.flatSlice(0, unit.elements));
    unit.gatherBuffer = Tensor();
  }
  unit.gather.reset();
  unit.gathered = true;
}

void FsdpStrategy::ensureGathered(Unit& unit) {
  if (unit.gathered) {
    return;
  }
  launchGather(unit);
  finishGather(unit);
}

// Starts the gathers of the units used next (in forward or backward order), at most max_inflight at once.
void FsdpStrategy::prefetchAfter(const Unit& unit, bool backward) {
  const std::vector<std::size_t>& order = backward ? backwardOrder_ : forwardOrder_;
  const auto at = std::find(order.begin(), order.end(), unit.group);
  // Units whose full parameters exist or are arriving: the current one plus at most max_inflight prefetched, so that
  // memory holds at most max_inflight + 1 gathered units (unless the plan itself needs more at once).
  int alive = static_cast<int>(std::count_if(units_.begin(), units_.end(),
                                             [](const Unit& u) { return u.gathered || static_cast<bool>(u.gather); }));
  for (auto next = at == order.end() ? at : at + 1; next != order.end() && alive <= options_.maxInflight; ++next) {
    Unit& candidate = units_[*next];
    if (!candidate.gathered && !candidate.gather) {
      launchGather(candidate);
      ++alive;
    }
  }
}

void FsdpStrategy::releaseParameters(Unit& unit) {
  if (unit.gather) {
    finishGather(unit);  // never free a buffer a collective still writes
  }
  if (context_->parameters().parametersMaterialized(unit.group)) {
    context_->parameters().releaseParameters(unit.group);
  }
  unit.gathered = false;
}

void FsdpStrategy::ensureGradientBuffer(Unit& unit) {
  ParameterGroups& store = context_->parameters();
  if (!store.gradientsMaterialized(unit.group)) {
    store.materializeGradients(unit.group);
    Tensor(store.flatGradients(unit.group)).zero();  // the plan may add into it (accumulation in place)
  }
}

void FsdpStrategy::onGradientReady(int parameter) {
  Unit& unit = unitOfParameter(parameter);
  if (--unit.pending > 0) {
    return;
  }
  if (at_.last() || options_.accumulate == AccumulateIn::Sharded) {
    launchReduce(unit);
  }
}

void FsdpStrategy::retireReductions(bool all) {
  while (!reducing_.empty()) {
    Unit& oldest = units_[reducing_.front()];
    const bool overLimit = static_cast<int>(reducing_.size()) >= options_.maxInflight;  // room for the next one
    if (!all && !overLimit && !oldest.reduce->isCompleted()) {
      return;  // collectives complete in launch order: the later ones are not done either
    }
    reducing_.erase(reducing_.begin());
    finishReduce(oldest);
  }
}

void FsdpStrategy::launchReduce(Unit& unit) {
  retireReductions(false);
  reducing_.push_back(unit.group);
  unit.reduceLaunched = true;
  const Tensor& gradients = context_->parameters().flatGradients(unit.group);
  if (!sharded()) {
    unit.reduce = group_->allReduce(gradients, ReduceOp::Average);
    return;
  }
  Tensor input = gradients;
  if (unit.shard * ranks_ != unit.elements) {
    unit.reduceInput =
        Tensor::zeros(gradients.dtype(), {unit.shard * ranks_}, MemoryCategory::Communication, gradients.device());
    unit.reduceInput.flatSlice(0, unit.elements).copyFrom(gradients);
    input = unit.reduceInput;
  }
  Tensor output = unit.shardGradients;
  if (options_.accumulate == AccumulateIn::Sharded && !at_.first()) {
    unit.reduceOutput =
        Tensor::empty(gradients.dtype(), {unit.shard}, MemoryCategory::Communication, gradients.device());
    output = unit.reduceOutput;
  }
  unit.reduce = group_->reduceScatter(input, output, ReduceOp::Average);
}

void FsdpStrategy::finishReduce(Unit& unit) {
  const auto start = std::chrono::steady_clock::now();
  unit.reduce->wait(timeout_);
  reduceWaitS_ += seconds(std::chrono::steady_clock::now() - start);
  context_->addFigure("collective_s", unit.reduce->runSeconds());
  context_->addFigure(sharded() ? "reduce_scatter_s" : "all_reduce_s", unit.reduce->runSeconds());
  unit.reduce.reset();
  if (unit.reduceOutput.defined()) {
    addInto(unit.shardGradients, unit.reduceOutput);
    unit.reduceOutput = Tensor();
  }
  unit.reduceInput = Tensor();
  if (sharded()) {
    context_->parameters().releaseGradients(unit.group);
  }
}

void FsdpStrategy::afterBackward(const StepInfo& at) {
  if (ranks_ == 1 || !(at.last() || (sharded() && options_.accumulate == AccumulateIn::Sharded))) {
    return;
  }
  for (Unit& unit : units_) {
    if (unit.reduceLaunched) {
      continue;
    }
    if (unit.gradientWriters > 0 && unit.pending > 0) {
      fail("fsdp: {} of the {} gradients of unit {} ({} elements) never became final in this backward pass",
           unit.pending, unit.gradientWriters, unit.group, unit.elements);
    }
    ensureGradientBuffer(unit);  // a unit nothing writes a gradient for reduces zeros, on every rank alike
    launchReduce(unit);
  }
  retireReductions(true);
  for (Unit& unit : units_) {
    if (sharded()) {
      releaseParameters(unit);  // grad_op's units still gathered after a unit-less tail of the plan
    }
  }
  context_->addFigure("communication_s", gatherWaitS_ + reduceWaitS_);
  gatherWaitS_ = 0;
  reduceWaitS_ = 0;
}

void FsdpStrategy::step(const StepInfo& /*at*/, double lr) {
  if (sharded()) {
    shardOptimizer_->step(lr);
  } else {
    context_->optimizers().full().step(lr);
  }
}

void FsdpStrategy::beforeEvaluate() {
  if (!sharded()) {
    return;
  }
  for (Unit& unit : units_) {
    launchGather(unit);
  }
  for (Unit& unit : units_) {
    if (unit.gather) {
      finishGather(unit);
    }
  }
}

void FsdpStrategy::afterEvaluate() {
  if (!sharded()) {
    return;
  }
  for (Unit& unit : units_) {
    releaseParameters(unit);
  }
}

void FsdpStrategy::teardown() {
  hooks_.clear();
}

}  // namespace strata::plugins::fsdp

STRATA_EXPORT_STRATEGY(strata::plugins::fsdp::FsdpStrategy, "fsdp", "0.1.0",
                       "fully sharded data parallel: parameters, gradients and optimizer state sharded by unit "
                       "(shard=full|grad_op|none), gathered per unit with prefetch, gradients reduce-scattered")
