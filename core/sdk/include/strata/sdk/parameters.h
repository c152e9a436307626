#pragma once

// The model's trainable parameters as a strategy sees them: flat buffers ("groups"), every parameter and gradient a
// view. Without a unit partition there is one group per dtype; with one (StrategyRequirements::units) every unit
// is a group of its own per dtype, in execution order, so a strategy can shard, free and re-gather it whole.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "strata/tensor.h"

namespace strata {

struct ParameterInfo {
  std::string name;
  TensorMeta meta;
  std::size_t group = 0;    // the flat buffer that holds it
  std::int64_t offset = 0;  // first element within that buffer
};

class ParameterGroups {
 public:
  virtual ~ParameterGroups() = default;

  virtual std::size_t size() const = 0;
  virtual const ParameterInfo& info(std::size_t i) const = 0;
  virtual Tensor parameter(std::size_t i) const = 0;
  virtual Tensor gradient(std::size_t i) const = 0;

  virtual std::size_t groupCount() const = 0;
  virtual const Tensor& flatParameters(std::size_t group) const = 0;
  virtual const Tensor& flatGradients(std::size_t group) const = 0;
  // The parameters of a group, in offset order.
  virtual std::vector<std::size_t> groupMembers(std::size_t group) const = 0;
  virtual std::int64_t totalElements() const = 0;
  virtual Device device() const = 0;

  virtual void zeroGradients() = 0;
  // Marks parameters as changed in place (after an update or a gather), so kernel caches keyed on their storage
  // (a convolution's reordered weights) refresh.
  virtual void bumpVersion() = 0;

  // Note [Released groups]: releasing a group returns its flat buffer's memory to the allocator (the accounting
  // drops by exactly its bytes); the views stay valid objects, but reading them before materialize() is an error
  // the kernels do not check. materialize() allocates the buffer again (uninitialised: the strategy fills it, e.g.
  // by an all-gather) and bumps the version, so no cache serves the weights it held before.
  virtual void releaseParameters(std::size_t group) = 0;
  virtual void materializeParameters(std::size_t group) = 0;
  virtual bool parametersMaterialized(std::size_t group) const = 0;
  virtual void releaseGradients(std::size_t group) = 0;
  virtual void materializeGradients(std::size_t group) = 0;
  virtual bool gradientsMaterialized(std::size_t group) const = 0;
};

}  // namespace strata
