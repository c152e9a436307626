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
  // A gradient compressor's state: error-feedback residuals, PowerSGD's factors (Note [Gradient compression]).
  Compression,
  Other,
};

inline constexpr std::size_t kMemoryCategoryCount = 8;

std::string_view memoryCategoryName(MemoryCategory category);

}  // namespace strata
