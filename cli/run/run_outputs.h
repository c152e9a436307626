#pragma once

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace strata::cli {

// RUN_DIR/metrics.jsonl: one JSON object per logged step and per epoch, flushed as written so a killed run keeps
// everything it logged.
class MetricsLog {
 public:
  explicit MetricsLog(const std::filesystem::path& runDir);
  void write(const nlohmann::json& record);

 private:
  std::ofstream out_;
};

// Writes a JSON document atomically (temporary file, then rename): a crash never leaves half a summary.
void writeJsonAtomically(const std::filesystem::path& file, const nlohmann::json& document);

}  // namespace strata::cli
