#pragma once

#include <filesystem>

#include "strata/graphs/graph.h"

namespace strata {

struct ImportOptions {
  bool runChecker = true;
  // Fail when the graph has ops without a CPU kernel (one message lists them all); inspect turns this off.
  bool requireSupportedOps = true;
};

// Reads an .onnx file (with external data), checks it, converts opsets outside 13..17 to 17 where ONNX's version
// converter can, and converts it to Strata's IR. Every error names the file and the problem.
Graph importOnnx(const std::filesystem::path& file, const ImportOptions& options = {});

}  // namespace strata
