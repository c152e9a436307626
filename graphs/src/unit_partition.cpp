#include "strata/graphs/unit_partition.h"

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
      // Note [Small modules]: a module below partition.smallModule elements (a batch norm, a bias-only layer, a
      // depthwise convolution) joins the unit of the module before it in execution order, which is what it
      // computes right after: one collective each way fewer, and a unit barely larger.
      std::size_t begin = 0;  // the current module's first parameter
      for (std::size_t i = 1; i <= parameters.size(); ++i) {
        const std::string_view module = i < parameters.size() ? modulePath(parameters[i].name) : std::string_view();
        if (i < parameters.size() && !module.empty() && module == modulePath(parameters[i - 1].name)) {
          unitOf[i] = unitOf[i - 1];
          continue;
        }
        // parameters [begin, i) are one module: merge it into the unit before it when small
        std::int64_t elements = 0;
        for (std::size_t j = begin; j < i; ++j)
          elements += parameters[j].elements;
        if (begin > 0 && elements < partition.smallModule) {
          for (std::size_t j = begin; j < i; ++j)
            unitOf[j] = unitOf[begin - 1];
        }
        if (i < parameters.size())
          unitOf[i] = unitOf[i - 1] + 1;
        begin = i;
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
