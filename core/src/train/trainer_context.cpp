#include "strata/train/trainer_context.h"

#include <algorithm>

#include "strata/error.h"

namespace strata {

TrainerContext::TrainerContext(TrainableProgram& program, const OptimizerOptions& optimizer, LossScaler* lossScaler,
                               ProcessGroup* group, Store* store, RankPlace place,
                               std::map<std::string, std::string> options, int gradAccumulation,
                               std::chrono::milliseconds timeout)
    : program_(program),
      hooks_(program.executor()),
      optimizers_(program.parameters(), optimizer, lossScaler),
      group_(group),
      store_(store),
      place_(place),
      options_(std::move(options)),
      gradAccumulation_(gradAccumulation),
      timeout_(timeout) {}

std::vector<Tensor> TrainerContext::buffers() {
  std::vector<Tensor> result;
  for (const auto& [name, tensor] : program_.buffers()) {
    result.push_back(tensor);
  }
  return result;
}

ProcessGroup* TrainerContext::subgroup(const std::vector<int>& ranks) {
  if (!makeSubgroup_ || group_ == nullptr) {
    return nullptr;
  }
  STRATA_CHECK(std::is_sorted(ranks.begin(), ranks.end()) && !ranks.empty() && ranks.front() >= 0 &&
                   ranks.back() < place_.worldSize && std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end() &&
                   std::find(ranks.begin(), ranks.end(), place_.rank) != ranks.end(),
               "subgroup: ranks must be distinct, ascending, below the world size {} and include rank {}",
               place_.worldSize, place_.rank);
  std::unique_ptr<ProcessGroup>& group = subgroups_[ranks];
  if (group == nullptr) {
    group = makeSubgroup_(ranks);
  }
  return group.get();
}

}  // namespace strata
