#include "run/run_outputs.h"

#include <cerrno>
#include <cstring>

#include "run/durable_files.h"
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
    errno = 0;
    std::ofstream out(temporary, std::ios::trunc);
    out << document.dump(2) << '\n';
    // A small document sits in the stream's buffer until close: a full disk shows only there.
    out.close();
    if (out.fail()) {
      const int error = errno;
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      fail("{}: cannot write{}", temporary, error != 0 ? fmt::format(": {}", std::strerror(error)) : std::string());
    }
  }
  syncFile(temporary);  // the data before the name (Note [Checkpoint durability])
  std::filesystem::rename(temporary, file);
}

}  // namespace strata::cli
