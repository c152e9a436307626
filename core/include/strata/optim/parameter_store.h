#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "strata/tensor.h"

namespace strata {

struct ParameterInfo {
  std::string name;
  TensorMeta meta;
  std::size_t group = 0;    // the flat buffer (one per dtype) that holds it
  std::int64_t offset = 0;  // first element within that buffer
};

// Parameters and their gradients in flat buffers, one group per dtype, with every parameter and gradient a view.
// Strategies bucket, shard and push slices of these buffers; optimizers run one fused loop per buffer.
class ParameterStore {
 public:
  // Copies the initial values (on any device) into the flat parameter buffers (category Parameters) and allocates
  // zeroed gradients (category Gradients), all on `device`.
  explicit ParameterStore(const std::vector<std::pair<std::string, Tensor>>& initial, Device device = Device::cpu());

  std::size_t size() const { return infos_.size(); }
  const ParameterInfo& info(std::size_t i) const { return infos_.at(i); }
  Tensor parameter(std::size_t i) const;
  Tensor gradient(std::size_t i) const;

  std::size_t groupCount() const { return flatParameters_.size(); }
  const Tensor& flatParameters(std::size_t group) const { return flatParameters_.at(group); }
  const Tensor& flatGradients(std::size_t group) const { return flatGradients_.at(group); }
  std::int64_t totalElements() const;
  // Where every flat buffer lives.
  Device device() const { return device_; }

  void zeroGradients();
  // Marks parameters as changed (after an optimizer step), so caches keyed on their storage refresh.
  void bumpVersion();

 private:
  std::vector<ParameterInfo> infos_;
  std::vector<Tensor> flatParameters_;
  std::vector<Tensor> flatGradients_;
  Device device_;
};

}  // namespace strata
