#include <utility>

#include <boost/dll/shared_library.hpp>

#include "strata/error.h"
#include "strata/plugin_host.h"

namespace strata {

LoadedStrategy::LoadedStrategy(PluginInfo info, std::unique_ptr<boost::dll::shared_library> library,
                               StrategyHandle* handle, DestroyFn destroy)
    : info_(std::move(info)), library_(std::move(library)), handle_(handle), destroy_(destroy) {}

// Note [plugin lifetime]: the strategy's code (vtable, destructor) lives in the library, so the plugin destroys
// it with its own strata_destroy_strategy (its own allocator, too) and only then may the library unload.
LoadedStrategy::~LoadedStrategy() {
  if (handle_ != nullptr) {
    destroy_(handle_);
    handle_ = nullptr;
  }
  library_.reset();
}

StrategyRequirements LoadedStrategy::requirements(const StrategyQuery& query) {
  StrategyRequirements out;
  check("requirements", handle_->requirements(query, out));
  return out;
}

void LoadedStrategy::setup(StrategyContext& context) {
  check("setup", handle_->setup(context));
}

std::int64_t LoadedStrategy::rejoin(StrategyContext& context) {
  std::int64_t step = 0;
  check("rejoin", handle_->rejoin(context, step));
  return step;
}

void LoadedStrategy::beforeForward(const StepInfo& at) {
  check("beforeForward", handle_->beforeForward(at));
}

void LoadedStrategy::afterBackward(const StepInfo& at) {
  check("afterBackward", handle_->afterBackward(at));
}

void LoadedStrategy::step(const StepInfo& at, double lr) {
  check("step", handle_->step(at, lr));
}

void LoadedStrategy::beforeEvaluate() {
  check("beforeEvaluate", handle_->beforeEvaluate());
}

void LoadedStrategy::afterEpoch(const StepInfo& at) {
  check("afterEpoch", handle_->afterEpoch(at));
}

void LoadedStrategy::afterEvaluate() {
  check("afterEvaluate", handle_->afterEvaluate());
}

void LoadedStrategy::saveState(StrategyContext& context, StateWriter& writer) {
  check("saveState", handle_->saveState(context, writer));
}

void LoadedStrategy::loadState(StrategyContext& context, StateReader& reader) {
  check("loadState", handle_->loadState(context, reader));
}

void LoadedStrategy::teardown() {
  check("teardown", handle_->teardown());
}

void LoadedStrategy::runRole(RoleContext& context) {
  check("runRole", handle_->runRole(context));
}

void LoadedStrategy::check(const char* hook, const std::string& message) const {
  STRATA_CHECK(message.empty(), "strategy '{}' ({}) failed in {}: {}", info_.name, info_.file.string(), hook, message);
}

}  // namespace strata
