#pragma once

// Hooks a strategy installs around the training step: before and after each node of the plan, and when a
// parameter's gradient is final. Every hook installed returns a HookHandle that removes it when destroyed.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <utility>

namespace strata {

// Which part of a training step a node belongs to.
enum class NodePhase : std::uint8_t { Forward, Loss, Backward };

// Where the trainer is: the global optimizer step (0-based, counted across epochs and resumes) and the micro-batch
// within it (gradient accumulation runs microBatches of them per step).
struct StepInfo {
  std::int64_t step = 0;
  int micro = 0;
  int microBatches = 1;
  bool first() const { return micro == 0; }
  bool last() const { return micro == microBatches - 1; }
};

// One node of the training plan, as hooks see it.
struct NodeInfo {
  std::size_t index = 0;  // position in the plan's execution order
  std::string_view name;
  std::string_view opType;
  NodePhase phase = NodePhase::Forward;
  // The parameters (indices into ParameterGroups) whose values this node reads: a forward node's weights, or the
  // weights a backward node needs (a convolution's input gradient reads its filter).
  std::span<const int> parameters;
  // The parameters whose gradient this node completes (it writes their gradient views; backward nodes only). A
  // strategy that releases gradient buffers materialises them before such a node.
  std::span<const int> gradientsFinal;
};

using NodeCallback = std::function<void(const NodeInfo&)>;
// Called with a parameter index when that parameter's gradient is final for the current micro-batch.
using GradientCallback = std::function<void(int parameter)>;

// Removes its hook when destroyed or reset (c10d's Reducer removes its autograd hooks the same way). Move-only.
class HookHandle {
 public:
  HookHandle() = default;
  explicit HookHandle(std::function<void()> remove) : remove_(std::move(remove)) {}
  ~HookHandle() { reset(); }
  HookHandle(HookHandle&& other) noexcept : remove_(std::exchange(other.remove_, nullptr)) {}
  HookHandle& operator=(HookHandle&& other) noexcept {
    if (this != &other) {
      reset();
      remove_ = std::exchange(other.remove_, nullptr);
    }
    return *this;
  }
  HookHandle(const HookHandle&) = delete;
  HookHandle& operator=(const HookHandle&) = delete;

  bool installed() const { return static_cast<bool>(remove_); }
  void reset() {
    if (remove_) {
      std::exchange(remove_, nullptr)();
    }
  }

 private:
  std::function<void()> remove_;
};

// The training plan's hook points. Hooks run on the host, in installation order, on the thread that runs the step.
class Hooks {
 public:
  virtual ~Hooks() = default;
  [[nodiscard]] virtual HookHandle beforeNode(NodeCallback callback) = 0;
  [[nodiscard]] virtual HookHandle afterNode(NodeCallback callback) = 0;
  [[nodiscard]] virtual HookHandle gradientReady(GradientCallback callback) = 0;
  // The plan's nodes in execution order, so a strategy can plan ahead (when a unit is first and last used).
  virtual std::size_t nodeCount() const = 0;
  virtual NodeInfo node(std::size_t index) const = 0;
};

}  // namespace strata
