#include "strata/train/trainer_context.h"

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

}  // namespace strata
