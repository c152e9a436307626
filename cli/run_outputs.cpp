#include "run_outputs.h"

#include "strata/error.h"

namespace strata::cli {

MetricsLog::MetricsLog(const std::filesystem::path& runDir) {
  std::filesystem::create_directories(runDir);
  const auto file = runDir / "metrics.jsonl";
  out_.open(file, std::ios::app);
  if (!out_) {
    fail("{}: cannot open for writing", file.string());
  }
}

void MetricsLog::write(const nlohmann::json& record) {
  out_ << record.dump() << '\n' << std::flush;
}

void writeJsonAtomically(const std::filesystem::path& file, const nlohmann::json& document) {
  const auto temporary = file.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << document.dump(2) << '\n';
    if (!out) {
      fail("{}: cannot write", temporary);
    }
  }
  std::filesystem::rename(temporary, file);
}

}  // namespace strata::cli
