#pragma once

#include <filesystem>

#include "strata/graphs/graph.h"

namespace strata {

// Writes `source` (an .onnx file) to `destination` with every initializer that `weights` holds under the same
// name replaced by its current value (trained parameters and batch-norm statistics). The rest of the model is
// untouched, so any ONNX runtime loads the result.
void exportOnnxWithWeights(const std::filesystem::path& source, const Graph& weights,
                           const std::filesystem::path& destination);

}  // namespace strata
