#include "dataset_files.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "strata/error.h"

namespace strata {
namespace fs = std::filesystem;

std::vector<std::uint8_t> readDatasetFile(const fs::path& file) {
  // gzread reads non-gzip files verbatim, so one path serves raw and compressed files under either name.
  gzFile gz = gzopen(file.c_str(), "rb");
  if (gz == nullptr) {
    fail("cannot open dataset file {}: {}", file.string(), errno != 0 ? std::strerror(errno) : "out of memory");
  }
  gzbuffer(gz, 1 << 18);
  std::vector<std::uint8_t> bytes;
  // Chunks grow from 64 KiB to 16 MiB: a small file (a test's, a fuzz input) is not zero-filled a megabyte at a
  // time, and a data set's 30 to 150 MB take a few dozen reads.
  std::size_t chunk = std::size_t{1} << 16;
  for (;;) {
    const std::size_t used = bytes.size();
    bytes.resize(used + chunk);
    const int n = gzread(gz, bytes.data() + used, static_cast<unsigned>(chunk));
    if (n < 0) {
      int code = Z_OK;
      const std::string message = gzerror(gz, &code);
      gzclose_r(gz);
      fail("dataset file {} is corrupt: {} (after {} decompressed bytes)", file.string(), message, used);
    }
    bytes.resize(used + static_cast<std::size_t>(n));
    if (n == 0) {
      break;
    }
    chunk = std::min(chunk * 2, std::size_t{1} << 24);
  }
  // Z_BUF_ERROR from gzclose_r: the last read ended inside a gzip stream, i.e. the .gz file was cut short.
  const int closed = gzclose_r(gz);
  if (closed == Z_BUF_ERROR) {
    fail("dataset file {} is truncated: the gzip stream ends early (after {} decompressed bytes)", file.string(),
         bytes.size());
  }
  STRATA_CHECK(closed == Z_OK, "cannot read dataset file {} (zlib error {})", file.string(), closed);
  return bytes;
}

void requireDatasetDirectory(const fs::path& directory, const std::string& what) {
  std::error_code ec;
  STRATA_CHECK(fs::is_directory(directory, ec), "{} directory {} does not exist{}", what, directory.string(),
               fs::exists(directory, ec) ? " (it is not a directory)" : "");
}

fs::path findDatasetFile(const fs::path& directory, const std::vector<std::string>& names, const std::string& what) {
  requireDatasetDirectory(directory, what);
  std::error_code ec;
  for (const std::string& name : names) {
    if (fs::is_regular_file(directory / name, ec)) {
      return directory / name;
    }
  }
  fail("{}: missing file in {}: expected one of {}", what, directory.string(), fmt::join(names, ", "));
}

}  // namespace strata
