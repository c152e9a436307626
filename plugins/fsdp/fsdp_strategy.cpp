// FSDP: fully sharded data parallel over the SDK's parameter units (Note [FSDP schedule] in fsdp_strategy.h).
#include "fsdp_strategy.h"

#include <algorithm>

#include <fmt/format.h>

#include "strata/error.h"

namespace strata::plugins::fsdp {

// Note [16-bit collectives]: with reduce_dtype=bf16|fp16 a unit's shard is rounded to 16 bits before its
// all-gather and its gradients before their reduce-scatter (summed in 16 bits, as NCCL does), which halves the bytes
// on the wire and in the gathered copies; the shards, the optimizer and its state stay float32 (master weights), and
// the gathered parameters are widened back into the float32 flat buffer the plan reads. Evaluation and export
// gather the float32 shards as they are, so an exported model carries the master weights, not their 16-bit
// rounding. The conversions run where the buffers live (Tensor::convertFrom: a kernel on CUDA, ordered before the
// collective that reads its result).

double FsdpStrategy::seconds(std::chrono::steady_clock::duration d) const {
  return std::chrono::duration<double>(d).count();
}

StrategyRequirements FsdpStrategy::requirements(const StrategyQuery& query) {
  const FsdpOptions options = parseFsdpOptions(query.options);
  if (options.hybrid && (query.nodes < 2 || query.worldSize % query.nodes != 0)) {
    fail(
        "fsdp: shard=hybrid shards within a node and replicates across nodes, so it needs --nnodes 2 or more with "
        "the same ranks on every node (this job: {} rank(s) on {} node(s)); on one node use shard=full",
        query.worldSize, query.nodes);
  }
  if (options.hybrid && query.worldSize == query.nodes && options.accumulate == AccumulateIn::Sharded) {
    fail(
        "fsdp: shard=hybrid with one rank per node shards nothing (it is DDP), so accumulate=sharded has no shard to "
        "add into; use accumulate=local");
  }
  StrategyRequirements requirements;
  requirements.units = options.unitsByModule
                           ? UnitPartition{UnitPartition::Kind::ByModule, 0, options.smallModuleParams}
                           : UnitPartition{UnitPartition::Kind::ByParameterCount, options.unitParams};
  requirements.accumulation =
      options.accumulate == AccumulateIn::Sharded ? Accumulation::ByStrategy : Accumulation::InPlace;
  return requirements;
}

void FsdpStrategy::setup(StrategyContext& context) {
  context_ = &context;
  options_ = parseFsdpOptions(context.options());
  timeout_ = options_.timeout.count() > 0 ? options_.timeout : context.timeout();
  world_ = context.processGroup();
  group_ = world_;
  rank_ = context.rank();
  ranks_ = group_ != nullptr ? group_->size() : 1;
  if (options_.hybrid && ranks_ > 1) {
    joinHybridGroups();
  }
  checkOffload();
  if (options_.reduceType) {
    const Tensor& flat = context.parameters().flatParameters(0);
    if (flat.dtype() != DType::Float32) {
      fail("fsdp: reduce_dtype={} rounds float32 master weights to 16 bits; this run's parameters are {}",
           dtypeName(*options_.reduceType), dtypeName(flat.dtype()));
    }
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

// shard=hybrid: rank r of a job of N nodes x P ranks (node-major) shards over the P ranks of its node and replicates
// its shard with the ranks of the same local index on the other nodes. With P = 1 nothing is sharded: DDP semantics.
void FsdpStrategy::joinHybridGroups() {
  const int nodes = context_->nodes();
  const int perNode = ranks_ / nodes;
  const int node = rank_ / perNode;
  const int local = rank_ % perNode;
  if (perNode == 1) {
    options_.level = ShardLevel::None;
    return;
  }
  std::vector<int> within;
  std::vector<int> across;
  for (int i = 0; i < perNode; ++i) {
    within.push_back(node * perNode + i);
  }
  for (int k = 0; k < nodes; ++k) {
    across.push_back(k * perNode + local);
  }
  group_ = context_->subgroup(within);
  replicas_ = context_->subgroup(across);
  if (group_ == nullptr || replicas_ == nullptr) {
    fail("fsdp: shard=hybrid needs process groups within and across nodes, which this trainer does not provide");
  }
  replica_ = node;
  rank_ = local;
  ranks_ = perNode;
}

// Note [Offload on the CPU] and Note [Offload to the host] (fsdp_options.h).
void FsdpStrategy::checkOffload() {
  if (options_.offload == Offload::None) {
    return;
  }
  const Device device = context_->parameters().device();
  if (device.type != DeviceType::CPU) {
    if (options_.hybrid) {
      fail(
          "fsdp: offload={} with shard=hybrid on {} is not implemented (the shards' all-reduce across nodes runs on "
          "the device); use shard=full or drop the option",
          offloadName(options_.offload), device.toString());
    }
    if (sharded()) {  // one rank shards nothing, so nothing moves
      context_->addFigure("fsdp_offload_to_host", 1.0);
    }
    return;
  }
  if (rank_ == 0) {
    fmt::print("fsdp: offload={} on the CPU backend is a no-op: the {} already live in host memory\n",
               offloadName(options_.offload),
               options_.offload == Offload::Params ? "parameter shards" : "optimizer state shards");
  }
  context_->addFigure("fsdp_offload_noop", 1.0);
}

bool FsdpStrategy::offloadsToHost() const {
  return options_.offload != Offload::None && context_->parameters().device().type != DeviceType::CPU;
}

// offload=optimizer: the all-gathers read the device copy of the shards the host's optimizer just updated.
void FsdpStrategy::refreshDeviceShards() {
  for (Unit& unit : units_) {
    if (unit.deviceShard.defined()) {
      unit.deviceShard.copyFrom(unit.shardParameters);
    }
  }
}

// Every rank starts from rank 0's parameters and buffers, as under DDP.
void FsdpStrategy::broadcastInitialState() {
  ParameterGroups& store = context_->parameters();
  std::vector<WorkHandle> works;
  for (std::size_t g = 0; g < store.groupCount(); ++g) {
    works.push_back(world_->broadcast(store.flatParameters(g), 0));
  }
  for (const Tensor& buffer : context_->buffers()) {
    works.push_back(world_->broadcast(buffer, 0));
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
    const Device shards = offloadsToHost() ? Device::cpu() : flat.device();  // Note [Offload to the host]
    unit.shardParameters = Tensor::zeros(flat.dtype(), {unit.shard}, MemoryCategory::Parameters, shards);
    unit.shardGradients = Tensor::zeros(flat.dtype(), {unit.shard}, MemoryCategory::Gradients, shards);
    const std::int64_t begin = rank_ * unit.shard;
    const std::int64_t count = std::clamp<std::int64_t>(unit.elements - begin, 0, unit.shard);
    if (count > 0) {
      unit.shardParameters.flatSlice(0, count).copyFrom(flat.flatSlice(begin, count));
    }
    if (offloadsToHost() && options_.offload == Offload::Optimizer) {
      unit.deviceShard = unit.shardParameters.to(flat.device(), MemoryCategory::Parameters);
    }
    slices.push_back(ParameterSlice{unit.shardParameters, unit.shardGradients});
  }
  // Note [Sharded optimizers] (strata/sdk/optimizer.h): the shards of group_ hold every gradient once, so clipping
  // and fp16 loss scaling see the norm summed over group_ (hybrid's replicas hold the same shards).
  shardOptimizer_ = context_->optimizers().createSharded(std::move(slices), [this](double local) {
    Tensor host = Tensor::empty(DType::Float64, {1});
    *host.data<double>() = local;
    Tensor sum = host.to(context_->parameters().device(), MemoryCategory::Communication);
    group_->allReduce(sum, ReduceOp::Sum)->wait(timeout_);
    return *sum.to(Device::cpu()).data<double>();
  });
  // What the memory bound depends on (docs/plugins.md): the largest unit, and the zeros that pad the shards.
  std::int64_t largest = 0;
  std::int64_t padding = 0;
  for (const Unit& unit : units_) {
    largest = std::max(largest, unit.elements);
    padding += unit.shard * ranks_ - unit.elements;
  }
  largestUnit_ = largest;
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
  Tensor source = unit.deviceShard.defined() ? unit.deviceShard : unit.shardParameters;
  if (source.device() != destination.device()) {  // offload=params: the host's shard, copied in for this gather
    source = source.to(destination.device(), MemoryCategory::Communication);
    unit.gatherSource = source;
  }
  // Evaluation and export gather the float32 master weights themselves (Note [16-bit collectives]).
  const bool sixteenBit = options_.reduceType.has_value() && !evaluating_;
  if (sixteenBit) {
    unit.gatherSource =
        Tensor::empty(*options_.reduceType, {unit.shard}, MemoryCategory::Communication, destination.device());
    unit.gatherSource.convertFrom(source);
    source = unit.gatherSource;
  }
  if (unit.shard * ranks_ != unit.elements || sixteenBit) {
    unit.gatherBuffer =
        Tensor::empty(source.dtype(), {unit.shard * ranks_}, MemoryCategory::Communication, destination.device());
    destination = unit.gatherBuffer;
  }
  unit.gather = group_->allGather(source, destination);
}

void FsdpStrategy::finishGather(Unit& unit) {
  const auto start = std::chrono::steady_clock::now();
  unit.gather->wait(timeout_);
  gatherWaitS_ += seconds(std::chrono::steady_clock::now() - start);
  context_->addFigure("collective_s", unit.gather->runSeconds());
  context_->addFigure("all_gather_s", unit.gather->runSeconds());
  if (unit.gatherBuffer.defined()) {
    Tensor(context_->parameters().flatParameters(unit.group))
        .convertFrom(unit.gatherBuffer.flatSlice(0, unit.elements));
    unit.gatherBuffer = Tensor();
    unit.gatherSource = Tensor();
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

// Note [Gather budget]: prefetch starts the gathers of the units used next (in forward or backward order), at most
// max_inflight in flight at once. Under shard=full it also stops where the gathered units (the current ones, those
// arriving, and the next) would hold more than 2 x the largest unit's elements, and a unit's gradient buffer waits
// for the oldest reductions until the full-size gradients alive fit the same budget: that is FSDP's memory bound
// (docs/plugins.md: 16 Psi / N + 2 x the largest unit's parameters and gradients) whatever the units' sizes, where a
// count of units alone allowed three large neighbours at once. grad_op keeps every unit gathered from its forward to
// its backward, so only the gathers in flight are counted there (counting the gathered units stopped its prefetch after
// the first max_inflight units).
void FsdpStrategy::prefetchAfter(const Unit& unit, bool backward) {
  const std::vector<std::size_t>& order = backward ? backwardOrder_ : forwardOrder_;
  const auto at = std::find(order.begin(), order.end(), unit.group);
  int inflight = 0;
  std::int64_t held = 0;  // elements gathered or arriving
  for (const Unit& u : units_) {
    inflight += u.gather ? 1 : 0;
    held += u.gathered || u.gather ? u.elements : 0;
  }
  const bool budgeted = options_.level == ShardLevel::Full;
  for (auto next = at == order.end() ? at : at + 1; next != order.end() && inflight < options_.maxInflight; ++next) {
    Unit& candidate = units_[*next];
    if (candidate.gathered || candidate.gather) {
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
    if (options_.level == ShardLevel::Full && sharded()) {
      makeRoomForGradients(unit);
    }
    store.materializeGradients(unit.group);
    Tensor(store.flatGradients(unit.group)).zero();  // the plan may add into it (accumulation in place)
  }
}

// Note [Gather budget]: waits for the oldest reductions (each frees its unit's full-size gradients) until `unit`'s
// gradients fit beside the others alive in 2 x the largest unit.
void FsdpStrategy::makeRoomForGradients(const Unit& unit) {
  const ParameterGroups& store = context_->parameters();
  std::int64_t held = 0;
  for (const Unit& u : units_) {
    held += store.gradientsMaterialized(u.group) ? u.elements : 0;
  }
  while (!reducing_.empty() && held + unit.elements > 2 * largestUnit_) {
    Unit& oldest = units_[reducing_.front()];
    reducing_.erase(reducing_.begin());
    finishReduce(oldest);
    held -= oldest.elements;
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
  const DType wire = options_.reduceType.value_or(gradients.dtype());
  if (!sharded()) {
    if (options_.reduceType) {  // Note [16-bit collectives]: reduced in a 16-bit copy, widened back when done
      unit.reduceInput = Tensor::empty(wire, {unit.elements}, MemoryCategory::Communication, gradients.device());
      unit.reduceInput.convertFrom(gradients);
    }
    unit.reduce = group_->allReduce(options_.reduceType ? unit.reduceInput : gradients, ReduceOp::Average);
    return;
  }
  Tensor input = gradients;
  if (unit.shard * ranks_ != unit.elements || options_.reduceType) {
    unit.reduceInput = Tensor::zeros(wire, {unit.shard * ranks_}, MemoryCategory::Communication, gradients.device());
    unit.reduceInput.flatSlice(0, unit.elements).convertFrom(gradients);
    input = unit.reduceInput;
  }
  Tensor output = unit.shardGradients;
  if ((options_.accumulate == AccumulateIn::Sharded && !at_.first()) || options_.reduceType ||
      output.device() != gradients.device()) {
    unit.reduceOutput = Tensor::empty(wire, {unit.shard}, MemoryCategory::Communication, gradients.device());
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
    const Tensor arrived = unit.reduceOutput.device() == unit.shardGradients.device()
                               ? unit.reduceOutput
                               : unit.reduceOutput.to(unit.shardGradients.device(), MemoryCategory::Communication);
    unit.shardGradients.convertFrom(arrived, options_.accumulate == AccumulateIn::Sharded && !at_.first());
    unit.reduceOutput = Tensor();
  }
  if (replicas_ != nullptr && sharded()) {
    // shard=hybrid: the node's mean, averaged with the other nodes' means of the same shard (equal rank counts).
    const auto acrossStart = std::chrono::steady_clock::now();
    const WorkHandle across = replicas_->allReduce(unit.shardGradients, ReduceOp::Average);
    across->wait(timeout_);
    reduceWaitS_ += seconds(std::chrono::steady_clock::now() - acrossStart);
    context_->addFigure("collective_s", across->runSeconds());
    context_->addFigure("all_reduce_s", across->runSeconds());
  }
  if (!sharded() && unit.reduceInput.defined()) {
    Tensor(context_->parameters().flatGradients(unit.group)).convertFrom(unit.reduceInput);
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
    refreshDeviceShards();
  } else {
    context_->optimizers().full().step(lr);
  }
}

void FsdpStrategy::beforeEvaluate() {
  if (!sharded()) {
    return;
  }
  evaluating_ = true;
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
  evaluating_ = false;
  for (Unit& unit : units_) {
    releaseParameters(unit);
  }
}

void FsdpStrategy::teardown() {
  hooks_.clear();
}

}  // namespace strata::plugins::fsdp

STRATA_EXPORT_STRATEGY(strata::plugins::fsdp::FsdpStrategy, "fsdp", "0.2.0",
                       "fully sharded data parallel: parameters, gradients and optimizer state sharded by unit "
                       "(shard=full|grad_op|none|hybrid), gathered per unit with prefetch, gradients "
                       "reduce-scattered (reduce_dtype=bf16|fp16: in 16 bits)")
