#include "launch/job_secret.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <system_error>

#include <fmt/format.h>

#include "strata/error.h"

namespace strata::cli {
namespace {

// ZeroMQ's Z85 (RFC 32): 4 bytes -> 5 characters.
std::string z85(const std::array<std::uint8_t, 32>& bytes) {
  static constexpr char kAlphabet[] =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
  std::string text;
  for (std::size_t i = 0; i < bytes.size(); i += 4) {
    std::uint32_t value = (std::uint32_t{bytes[i]} << 24) | (std::uint32_t{bytes[i + 1]} << 16) |
                          (std::uint32_t{bytes[i + 2]} << 8) | bytes[i + 3];
    char chunk[5];
    for (int k = 4; k >= 0; --k) {
      chunk[k] = kAlphabet[value % 85];
      value /= 85;
    }
    text.append(chunk, 5);
  }
  return text;
}

}  // namespace

void writeJobSecret(const std::filesystem::path& path) {
  std::array<std::uint8_t, 32> bytes{};
  std::ifstream random("/dev/urandom", std::ios::binary);
  if (!random.read(reinterpret_cast<char*>(bytes.data()), bytes.size())) {
    fail("cannot read /dev/urandom for the job's secret");
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    fail("cannot create the secret file {}: {}", path.string(), std::strerror(errno));
  }
  const std::string text = z85(bytes) + "\n";
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written) {
    fail("cannot write the secret file {}", path.string());
  }
}

JobSecret::JobSecret() {
  std::array<std::uint8_t, 32> idBytes{};
  std::ifstream random("/dev/urandom", std::ios::binary);
  random.read(reinterpret_cast<char*>(idBytes.data()), 8);
  for (std::size_t i = 0; i < 8; ++i) {
    id_ += fmt::format("{:02x}", idBytes[i]);
  }
  const char* given = std::getenv(kJobSecretVariable);
  if (given != nullptr && given[0] != '\0') {
    return;
  }
  std::string pattern = (std::filesystem::temp_directory_path() / "strata-job-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {  // mode 0700
    fail("cannot make a directory for the job's secret under {}: {}", std::filesystem::temp_directory_path().string(),
         std::strerror(errno));
  }
  directory_ = pattern;
  file_ = directory_ / "secret";
  writeJobSecret(file_);
}

JobSecret::~JobSecret() {
  if (!directory_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
}

std::vector<std::string> JobSecret::environment() const {
  std::vector<std::string> entries{fmt::format("STRATA_JOB_ID={}", id_)};
  if (!file_.empty()) {
    entries.push_back(fmt::format("{}={}", kJobSecretVariable, file_.string()));
  }
  return entries;
}

}  // namespace strata::cli
