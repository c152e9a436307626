#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

namespace strata::cli {

// Writes a comparison's report into `out`: results.json and results.csv (every figure, for users' own plots),
// figures/*.svg, report.md and a self-contained report.html (the SVGs inline, no network needed). `results` is
// comparisonResults(); `host` describes the machine (CPU model, ISA, cores).
void writeComparisonReport(const std::filesystem::path& out, const nlohmann::json& results, const nlohmann::json& host);

}  // namespace strata::cli
