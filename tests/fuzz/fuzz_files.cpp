#include "fuzz/fuzz_files.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace strata::fuzz {
namespace {

struct Scratch {
  Scratch() {
    const char* tmp = std::getenv("TMPDIR");
    path = std::filesystem::path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") /
           ("strata-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path path;
};

}  // namespace

const std::filesystem::path& scratchDirectory() {
  static const Scratch scratch;
  return scratch.path;
}

std::filesystem::path writeScratchFile(const std::string& name, const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path file = scratchDirectory() / name;
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) {
    throw std::runtime_error("fuzz harness: cannot write " + file.string());  // the harness's fault, not the target's
  }
  return file;
}

}  // namespace strata::fuzz
