#pragma once

#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare/compare_runner.h"

namespace strata::cli {

// Everything the report says of one configuration, read from its run directory: the figures of summary.json
// (copied, never recomputed, so the report equals the run), per-rank memory and communication, the loss and
// accuracy curves of metrics.jsonl, the resource time series, and the prediction of `strata plan` beside the
// measurement with its error. A configuration that failed keeps its reason and whatever figures it left.
nlohmann::json configurationResult(const CompareConfiguration& c, const RunState& state,
                                   const std::filesystem::path& runDir);

// Sets "pareto_front" on each result: true where no other finished configuration of the same model is both
// faster (train_time_s) and leaner (training_peak_memory_bytes).
void markParetoFronts(nlohmann::json& results);

// Every configuration's result, in the comparison's order, with the Pareto fronts marked.
nlohmann::json comparisonResults(const ComparisonRunner& runner);

}  // namespace strata::cli
