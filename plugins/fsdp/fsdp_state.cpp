// FSDP checkpoints: every rank writes its shards; a load reassembles each unit from the shards of however many
// ranks wrote them and takes this rank's part, so a run resumes on another world size. A checkpoint of a replicated
// strategy (DDP, single: parameters by name) loads too, sharded on the way in.
#include <algorithm>
#include <sstream>

#include <fmt/format.h>

#include "fsdp_strategy.h"
#include "strata/error.h"

namespace strata::plugins::fsdp {
namespace {

std::string shardKey(int rank, std::size_t unit, const std::string& what) {
  return fmt::format("fsdp/rank{}/unit{}/{}", rank, unit, what);
}

// Elements [rank * shard, rank * shard + shard) of `full` (a host tensor), zero past its end, into `shard`.
void takeShard(const Tensor& full, int rank, const Tensor& shard) {
  const std::int64_t begin = rank * shard.numel();
  const std::int64_t count = std::clamp<std::int64_t>(full.numel() - begin, 0, shard.numel());
  Tensor part = Tensor::zeros(shard.dtype(), {shard.numel()});
  if (count > 0) {
    part.flatSlice(0, count).copyFrom(full.flatSlice(begin, count));
  }
  Tensor(shard).copyFrom(part);
}

// A unit's `elements` values reassembled on the host from the shards `ranks` ranks wrote under `what`.
Tensor reassemble(StateReader& reader, std::size_t unit, const std::string& what, DType dtype, std::int64_t elements,
                  int ranks) {
  const std::int64_t shard = (elements + ranks - 1) / ranks;
  Tensor full = Tensor::zeros(dtype, {elements});
  Tensor part = Tensor::empty(dtype, {shard});
  for (int r = 0; r < ranks; ++r) {
    reader.getTensor(shardKey(r, unit, what), part);
    const std::int64_t begin = r * shard;
    const std::int64_t count = std::clamp<std::int64_t>(elements - begin, 0, shard);
    if (count > 0) {
      full.flatSlice(begin, count).copyFrom(part.flatSlice(0, count));
    }
  }
  return full;
}

}  // namespace

void FsdpStrategy::saveState(StrategyContext& context, StateWriter& writer) {
  if (!sharded()) {
    Strategy::saveState(context, writer);  // replicated: rank 0 writes the full state
    return;
  }
  if (replica_ != 0) {
    return;  // shard=hybrid: the first node's ranks write the shards every node holds
  }
  const std::vector<Tensor> state = shardOptimizer_->state();
  for (std::size_t u = 0; u < units_.size(); ++u) {
    writer.putTensor(shardKey(rank_, u, "param"), units_[u].shardParameters);
    for (std::size_t k = u; k < state.size(); k += units_.size()) {  // state()[k * units + u]: see Optimizer
      writer.putTensor(shardKey(rank_, u, fmt::format("state{}", k / units_.size())), state[k]);
    }
  }
  if (rank_ == 0) {
    std::string units;
    for (const Unit& unit : units_) {
      units += fmt::format(" {}", unit.elements);
    }
    writer.putText("fsdp/layout", fmt::format("{}{}", ranks_, units));
    writer.putText("fsdp/optimizer_steps", std::to_string(shardOptimizer_->steps()));
  }
}

void FsdpStrategy::loadState(StrategyContext& context, StateReader& reader) {
  if (!sharded()) {
    Strategy::loadState(context, reader);
    return;
  }
  ParameterGroups& store = context.parameters();
  const std::vector<Tensor> state = shardOptimizer_->state();
  if (!reader.has("fsdp/layout")) {
    // A replicated strategy's checkpoint: the full parameters by name and the full optimizer's state per group.
    for (Unit& unit : units_) {
      const Tensor& flat = store.flatParameters(unit.group);
      Tensor full = Tensor::zeros(flat.dtype(), {unit.elements});
      for (std::size_t p : store.groupMembers(unit.group)) {
        const ParameterInfo& info = store.info(p);
        reader.getTensor("param/" + info.name, full.viewAs(info.offset, info.meta));
      }
      takeShard(full, rank_, unit.shardParameters);
    }
    for (std::size_t k = 0; k < state.size(); ++k) {
      const Unit& unit = units_[k % units_.size()];
      Tensor full = Tensor::zeros(state[k].dtype(), {unit.elements});
      reader.getTensor("optimizer/" + std::to_string(k), full);
      takeShard(full, rank_, state[k]);
    }
    shardOptimizer_->setSteps(std::stoll(reader.getText("optimizer/steps")));
    refreshDeviceShards();
    return;
  }
  std::istringstream layout(reader.getText("fsdp/layout"));
  int savedRanks = 0;
  layout >> savedRanks;
  for (Unit& unit : units_) {
    std::int64_t elements = -1;
    layout >> elements;
    if (elements != unit.elements) {
      fail("fsdp: the checkpoint's unit {} holds {} elements but this run's holds {} (another model or unit_params?)",
           unit.group, elements, unit.elements);
    }
    const DType dtype = unit.shardParameters.dtype();
    takeShard(reassemble(reader, unit.group, "param", dtype, unit.elements, savedRanks), rank_, unit.shardParameters);
  }
  for (std::size_t k = 0; k < state.size(); ++k) {
    const std::size_t u = k % units_.size();
    const Tensor full = reassemble(reader, u, fmt::format("state{}", k / units_.size()), state[k].dtype(),
                                   units_[u].elements, savedRanks);
    takeShard(full, rank_, state[k]);
  }
  shardOptimizer_->setSteps(std::stoll(reader.getText("fsdp/optimizer_steps")));
  refreshDeviceShards();
}

}  // namespace strata::plugins::fsdp
