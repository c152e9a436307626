#include "strata/optim/parameter_store.h"

#include <map>

namespace strata {

ParameterStore::ParameterStore(const std::vector<std::pair<std::string, Tensor>>& initial, Device device)
    : device_(device) {
  std::map<DType, std::size_t> groupOf;
  std::vector<std::int64_t> groupSizes;
  std::vector<DType> groupTypes;
  for (const auto& [name, value] : initial) {
    auto [it, inserted] = groupOf.try_emplace(value.dtype(), groupSizes.size());
    if (inserted) {
      groupSizes.push_back(0);
      groupTypes.push_back(value.dtype());
    }
    infos_.push_back(ParameterInfo{name, value.meta(), it->second, groupSizes[it->second]});
    groupSizes[it->second] += value.numel();
  }
  for (std::size_t g = 0; g < groupSizes.size(); ++g) {
    flatParameters_.push_back(Tensor::empty(groupTypes[g], {groupSizes[g]}, MemoryCategory::Parameters, device));
    flatGradients_.push_back(Tensor::zeros(groupTypes[g], {groupSizes[g]}, MemoryCategory::Gradients, device));
  }
  for (std::size_t i = 0; i < initial.size(); ++i) {
    parameter(i).copyFrom(initial[i].second);
  }
}

Tensor ParameterStore::parameter(std::size_t i) const {
  const ParameterInfo& p = infos_.at(i);
  return flatParameters_[p.group].viewAs(p.offset, p.meta);
}

Tensor ParameterStore::gradient(std::size_t i) const {
  const ParameterInfo& p = infos_.at(i);
  return flatGradients_[p.group].viewAs(p.offset, p.meta);
}

std::int64_t ParameterStore::totalElements() const {
  std::int64_t n = 0;
  for (const Tensor& t : flatParameters_) {
    n += t.numel();
  }
  return n;
}

void ParameterStore::zeroGradients() {
  for (Tensor& t : flatGradients_) {
    t.zero();  // a memset on the CPU; on a device, a fill ordered on its compute stream
  }
}

void ParameterStore::bumpVersion() {
  for (Tensor& t : flatParameters_) {
    t.storage()->bumpVersion();
  }
}

}  // namespace strata
