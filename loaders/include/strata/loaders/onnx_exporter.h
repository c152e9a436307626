#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "strata/graphs/graph.h"

namespace strata {

// Writes `source` (an .onnx file) to `destination` with every initializer that `weights` holds under the same
// name replaced by its current value (trained parameters and batch-norm statistics). The rest of the model is
// untouched, so any ONNX runtime loads the result. `metadata` adds (or replaces) entries of the model's
// metadata_props, e.g. the tokenizer a language model was trained with (Note [Tokenizers]).
void exportOnnxWithWeights(const std::filesystem::path& source, const Graph& weights,
                           const std::filesystem::path& destination,
                           const std::map<std::string, std::string>& metadata = {});

// The metadata_props of an .onnx file; throws Error naming the file when it cannot be read.
std::map<std::string, std::string> readOnnxMetadata(const std::filesystem::path& model);

}  // namespace strata
