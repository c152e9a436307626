#pragma once

#include <string>
#include <string_view>

#include "strata/optim/optimizer.h"

namespace strata {

// The store key under which rank 0 publishes the run's optimizer (OptimizerOptions as text) when training starts,
// so that role processes (parameter servers) apply the very update rule the workers were given.
inline constexpr const char* kRunOptimizerKey = "trainer/optimizer";

// "kind=adam momentum=0 ... max_grad_norm=0": every field, doubles at full precision (round-trips exactly).
std::string optimizerOptionsToText(const OptimizerOptions& options);
// The inverse; throws Error naming the field when the text is malformed.
OptimizerOptions optimizerOptionsFromText(std::string_view text);

}  // namespace strata
