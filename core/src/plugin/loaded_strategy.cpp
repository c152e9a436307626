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

void LoadedStrategy::setup(StrategyContext& context) {
  check("setup", handle_->setup(context));
}

void LoadedStrategy::beforeForward(int micro, bool last) {
  check("beforeForward", handle_->beforeForward(micro, last));
}

void LoadedStrategy::afterBackward(int micro, bool last) {
  check("afterBackward", handle_->afterBackward(micro, last));
}

void LoadedStrategy::step(double lr) {
  check("step", handle_->step(lr));
}

void LoadedStrategy::teardown() {
  check("teardown", handle_->teardown());
}

void LoadedStrategy::check(const char* hook, const std::string& message) const {
  STRATA_CHECK(message.empty(), "strategy '{}' ({}) failed in {}: {}", info_.name, info_.file.string(), hook, message);
}

}  // namespace strata
