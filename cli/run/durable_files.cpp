#include "run/durable_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "strata/error.h"

namespace strata::cli {
namespace {

void syncPath(const std::filesystem::path& path, int flags, const char* what) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) {
    fail("{}: cannot open the {} to flush it to disk: {}", path.string(), what, std::strerror(errno));
  }
  int result = 0;
  do {
    result = ::fsync(fd);
  } while (result != 0 && errno == EINTR);
  const int error = errno;
  ::close(fd);
  if (result != 0) {
    fail("{}: cannot flush the {} to disk (fsync): {}", path.string(), what, std::strerror(error));
  }
}

}  // namespace

void syncFile(const std::filesystem::path& file) {
  syncPath(file, O_RDONLY, "file");
}

void syncDirectory(const std::filesystem::path& directory) {
  syncPath(directory, O_RDONLY | O_DIRECTORY, "directory");
}

}  // namespace strata::cli
