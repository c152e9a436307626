#pragma once

#include "strata/executor.h"
#include "strata/sdk/hooks.h"

namespace strata {

// The SDK's Hooks over an executor's plan: NodeInfo built from the plan's steps, HookHandles that remove the
// executor's hooks.
class PlanHooks final : public Hooks {
 public:
  explicit PlanHooks(Executor& executor) : executor_(executor) {}

  HookHandle beforeNode(NodeCallback callback) override;
  HookHandle afterNode(NodeCallback callback) override;
  HookHandle gradientReady(GradientCallback callback) override;
  std::size_t nodeCount() const override { return executor_.program().steps.size(); }
  NodeInfo node(std::size_t index) const override;

 private:
  HookHandle removing(int id);

  Executor& executor_;
};

}  // namespace strata
