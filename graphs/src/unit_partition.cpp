#include "strata/graphs/unit_partition.h"

#include <algorithm>
#include <utility>

#include "strata/error.h"

namespace strata {

// Note [Units of unnamed parameters]: exporters name folded or fused initializers without a module path
// ("onnx::Conv_193"). Treating "" as one module would merge every such parameter next to each other into a single
// unit as large as the model, which defeats sharding, so a parameter without a module path is a unit of its own.

std::string_view modulePath(std::string_view parameterName) {
  const std::size_t cut = parameterName.find_last_of("./");
  return cut == std::string_view::npos ? std::string_view() : parameterName.substr(0, cut);
}

std::vector<int> partitionUnits(const std::vector<UnitCandidate>& parameters, const UnitPartition& partition) {
  std::vector<int> unitOf(parameters.size(), 0);
  switch (partition.kind) {
    case UnitPartition::Kind::None:
      break;
    case UnitPartition::Kind::ByModule: {
      // Modules: runs of parameters with the same (non-empty) module path, as [first, end) ranges.
      std::vector<std::pair<std::size_t, std::size_t>> modules;
      for (std::size_t i = 0; i < parameters.size(); ++i) {
        const std::string_view module = modulePath(parameters[i].name);
        if (i == 0 || module.empty() || module != modulePath(parameters[i - 1].name)) {
          modules.emplace_back(i, i);
        }
        modules.back().second = i + 1;
      }
      const auto elementsOf = [&](std::pair<std::size_t, std::size_t> module) {
        std::int64_t elements = 0;
        for (std::size_t j = module.first; j < module.second; ++j)
          elements += parameters[j].elements;
        return elements;
      };
      std::int64_t largestModule = 0;
      for (const auto& module : modules)
        largestModule = std::max(largestModule, elementsOf(module));
      // Note [Small modules]: a module below partition.smallModule elements (a batch norm, a bias-only layer, a
      // depthwise convolution) joins the unit of the module before it in execution order, which is what it
      // computes right after: one collective each way fewer, and a unit barely larger. A unit grows past the
      // largest module by less than one small module, so a long run of small modules (EfficientNet's) still
      // splits into several units and the largest unit, which the memory bound and the gather budget (Note
      // [Gather budget] in plugins/fsdp) are stated in, stays close to the largest module.
      const std::int64_t unitLimit = largestModule + partition.smallModule;
      int unit = -1;
      std::int64_t unitElements = 0;
      for (const auto& module : modules) {
        const std::int64_t elements = elementsOf(module);
        const bool joins = unit >= 0 && elements < partition.smallModule && unitElements + elements <= unitLimit;
        if (!joins) {
          ++unit;
          unitElements = 0;
        }
        unitElements += elements;
        for (std::size_t j = module.first; j < module.second; ++j)
          unitOf[j] = unit;
      }
      break;
    }
    case UnitPartition::Kind::ByParameterCount: {
      STRATA_CHECK(partition.parameters > 0, "a unit partition by parameter count needs a positive count, not {}",
                   partition.parameters);
      std::int64_t held = 0;  // elements in the current unit
      for (std::size_t i = 0; i < parameters.size(); ++i) {
        if (held >= partition.parameters) {
          unitOf[i] = unitOf[i - 1] + 1;
          held = 0;
        } else if (i > 0) {
          unitOf[i] = unitOf[i - 1];
        }
        held += parameters[i].elements;
      }
      break;
    }
  }
  return unitOf;
}

}  // namespace strata
