#include "strata/train/plan_hooks.h"

namespace strata {
namespace {

NodeInfo infoOf(const Program& program, std::size_t index) {
  const ProgramStep& step = program.steps[index];
  return NodeInfo{index, step.nodeName, step.opType, step.phase, step.parametersRead, step.gradientsReady};
}

}  // namespace

HookHandle PlanHooks::removing(int id) {
  return HookHandle([executor = &executor_, id] { executor->removeHook(id); });
}

HookHandle PlanHooks::beforeNode(NodeCallback callback) {
  return removing(executor_.addBeforeNodeHook([this, callback = std::move(callback)](const NodeEvent& event) {
    callback(infoOf(executor_.program(), event.stepIndex));
  }));
}

HookHandle PlanHooks::afterNode(NodeCallback callback) {
  return removing(executor_.addAfterNodeHook([this, callback = std::move(callback)](const NodeEvent& event) {
    callback(infoOf(executor_.program(), event.stepIndex));
  }));
}

HookHandle PlanHooks::gradientReady(GradientCallback callback) {
  return removing(executor_.addGradientReadyHook(std::move(callback)));
}

NodeInfo PlanHooks::node(std::size_t index) const {
  STRATA_CHECK(index < nodeCount(), "hooks: node {} of a plan of {} nodes", index, nodeCount());
  return infoOf(executor_.program(), index);
}

}  // namespace strata
