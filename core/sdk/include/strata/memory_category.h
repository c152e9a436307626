#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace strata {

// What an allocation holds. The study's per-rank memory breakdown is reported by these categories.
enum class MemoryCategory : std::size_t {
  Parameters,
  Gradients,
  OptimizerState,
  Activations,
  Communication,
  Workspace,
  Other,
};

inline constexpr std::size_t kMemoryCategoryCount = 7;

std::string_view memoryCategoryName(MemoryCategory category);

}  // namespace strata
