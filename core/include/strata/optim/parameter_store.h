#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "strata/sdk/parameters.h"
#include "strata/tensor.h"

namespace strata {

// The parameters as groups of flat buffers, parameters and gradients as views (strata/sdk/parameters.h). Without
// a partition there is one group per dtype; with one, a group per (unit, dtype), in the units' order. Strategies
// bucket, shard and push slices of these buffers; optimizers run one fused loop per buffer.
class ParameterStore final : public ParameterGroups {
 public:
  // Copies the initial values (on any device) into the flat parameter buffers (category Parameters) and allocates
  // zeroed gradients (category Gradients), all on `device`. `unitOf` (empty, or one entry per parameter, values
  // non-decreasing) puts parameters of different units into different groups.
  explicit ParameterStore(const std::vector<std::pair<std::string, Tensor>>& initial, Device device = Device::cpu(),
                          const std::vector<int>& unitOf = {});

  std::size_t size() const override { return infos_.size(); }
  const ParameterInfo& info(std::size_t i) const override { return infos_.at(i); }
  Tensor parameter(std::size_t i) const override;
  Tensor gradient(std::size_t i) const override;

  std::size_t groupCount() const override { return flatParameters_.size(); }
  const Tensor& flatParameters(std::size_t group) const override { return flatParameters_.at(group); }
  const Tensor& flatGradients(std::size_t group) const override { return flatGradients_.at(group); }
  std::vector<std::size_t> groupMembers(std::size_t group) const override;
  std::int64_t totalElements() const override;
  // Where every flat buffer lives.
  Device device() const override { return device_; }

  void zeroGradients() override;
  void bumpVersion() override;

  void releaseParameters(std::size_t group) override;
  void materializeParameters(std::size_t group) override;
  bool parametersMaterialized(std::size_t group) const override;
  void releaseGradients(std::size_t group) override;
  void materializeGradients(std::size_t group) override;
  bool gradientsMaterialized(std::size_t group) const override;

 private:
  std::vector<ParameterInfo> infos_;
  std::vector<Tensor> flatParameters_;
  std::vector<Tensor> flatGradients_;
  Device device_;
};

}  // namespace strata
