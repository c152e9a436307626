#include "local_sgd_strategy.h"

#include <chrono>
#include <string>
#include <vector>

#include "strata/error.h"

namespace example {

namespace {

int parsePositive(const std::string& key, const std::string& value) {
  std::size_t used = 0;
  int parsed = 0;
  try {
    parsed = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  STRATA_CHECK(used == value.size() && parsed >= 1, "strategy 'local_sgd': option {}={} must be a positive integer",
               key, value);
  return parsed;
}

}  // namespace

void LocalSgdStrategy::setup(strata::StrategyContext& context) {
  for (const auto& [key, value] : context.options()) {
    if (key == "k") {
      k_ = parsePositive(key, value);
    } else {
      strata::fail("strategy 'local_sgd' does not accept option '{}' (--strategy-opt {}={}); it takes: k", key, key,
                   value);
    }
  }
  context_ = &context;
  // Every rank starts from rank 0's parameters, so the periodic averages stay meaningful.
  if (strata::ProcessGroup* group = context.processGroup(); group != nullptr) {
    strata::ParameterGroups& store = context.parameters();
    std::vector<strata::WorkHandle> works;
    for (std::size_t g = 0; g < store.groupCount(); ++g) {
      works.push_back(group->broadcast(store.flatParameters(g), 0));
    }
    for (auto& work : works) {
      work->wait(context.timeout());
    }
    store.bumpVersion();
  }
}

void LocalSgdStrategy::step(const strata::StepInfo& at, double lr) {
  STRATA_CHECK(context_ != nullptr, "strategy 'local_sgd': step called before setup");
  context_->optimizers().full().step(lr);
  if (context_->processGroup() != nullptr && (at.step + 1) % k_ == 0) {
    averageParameters();
  }
}

void LocalSgdStrategy::averageParameters() {
  const auto start = std::chrono::steady_clock::now();
  strata::ProcessGroup& group = *context_->processGroup();
  strata::ParameterGroups& store = context_->parameters();
  std::vector<strata::WorkHandle> works;
  for (std::size_t g = 0; g < store.groupCount(); ++g) {
    works.push_back(group.allReduce(store.flatParameters(g), strata::ReduceOp::Average));
  }
  for (auto& work : works) {
    work->wait(context_->timeout());
  }
  store.bumpVersion();
  context_->addFigure("communication_s",
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace example

STRATA_EXPORT_STRATEGY(example::LocalSgdStrategy, "local_sgd", "0.1.0",
                       "local SGD: local steps, parameters averaged across ranks every k steps (--strategy-opt k=4)")
