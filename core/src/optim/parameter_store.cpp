#include "strata/optim/parameter_store.h"

#include <map>
#include <utility>

#include "strata/error.h"

namespace strata {

ParameterStore::ParameterStore(const std::vector<std::pair<std::string, Tensor>>& initial, Device device,
                               const std::vector<int>& unitOf)
    : device_(device) {
  STRATA_CHECK(unitOf.empty() || unitOf.size() == initial.size(),
               "parameter store: {} unit assignments for {} parameters", unitOf.size(), initial.size());
  std::map<std::pair<int, DType>, std::size_t> groupOf;
  std::vector<std::int64_t> groupSizes;
  std::vector<DType> groupTypes;
  for (std::size_t i = 0; i < initial.size(); ++i) {
    const auto& [name, value] = initial[i];
    const int unit = unitOf.empty() ? 0 : unitOf[i];
    STRATA_CHECK(i == 0 || unitOf.empty() || unitOf[i] >= unitOf[i - 1],
                 "parameter store: units must be contiguous in parameter order, but '{}' goes back to unit {}", name,
                 unit);
    auto [it, inserted] = groupOf.try_emplace({unit, value.dtype()}, groupSizes.size());
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

std::vector<std::size_t> ParameterStore::groupMembers(std::size_t group) const {
  std::vector<std::size_t> members;
  for (std::size_t i = 0; i < infos_.size(); ++i) {
    if (infos_[i].group == group) {
      members.push_back(i);  // parameters enter their group in offset order
    }
  }
  return members;
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
    if (t.storage()->materialized()) {
      t.zero();  // a memset on the CPU; on a device, a fill ordered on its compute stream
    }
  }
}

void ParameterStore::bumpVersion() {
  for (Tensor& t : flatParameters_) {
    t.storage()->bumpVersion();
  }
}

void ParameterStore::releaseParameters(std::size_t group) {
  flatParameters_.at(group).storage()->release();
}

void ParameterStore::materializeParameters(std::size_t group) {
  flatParameters_.at(group).storage()->materialize();
}

bool ParameterStore::parametersMaterialized(std::size_t group) const {
  return flatParameters_.at(group).storage()->materialized();
}

void ParameterStore::releaseGradients(std::size_t group) {
  flatGradients_.at(group).storage()->release();
}

void ParameterStore::materializeGradients(std::size_t group) {
  flatGradients_.at(group).storage()->materialize();
}

bool ParameterStore::gradientsMaterialized(std::size_t group) const {
  return flatGradients_.at(group).storage()->materialized();
}

}  // namespace strata
