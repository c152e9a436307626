#include "strata/loaders/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "strata/error.h"

namespace strata {
namespace {

std::uint32_t readLittle32(const unsigned char* p) {
  return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) | (std::uint32_t{p[3]} << 24);
}

std::uint64_t readLittle64(const unsigned char* p) {
  return std::uint64_t{readLittle32(p)} | (std::uint64_t{readLittle32(p + 4)} << 32);
}

void putLittle(std::vector<unsigned char>& out, std::uint64_t value, int bytes) {
  for (int b = 0; b < bytes; ++b) {
    out.push_back(static_cast<unsigned char>(value >> (8 * b)));
  }
}

}  // namespace

TokenFile::TokenFile(const std::filesystem::path& path, int rawTokenBytes) : path_(path) {
  STRATA_CHECK(rawTokenBytes == 2 || rawTokenBytes == 4, "{}: token ids are 2 or 4 bytes wide, not {}", path.string(),
               rawTokenBytes);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    fail("token file {}: cannot open: {}", path.string(), std::strerror(errno));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    fail("token file {}: cannot stat: {}", path.string(), std::strerror(error));
  }
  mappedBytes_ = static_cast<std::size_t>(info.st_size);
  if (mappedBytes_ > 0) {
    void* mapped = ::mmap(nullptr, mappedBytes_, PROT_READ, MAP_SHARED, fd, 0);
    const int error = errno;
    ::close(fd);
    if (mapped == MAP_FAILED) {
      fail("token file {}: cannot map its {} bytes: {}", path.string(), mappedBytes_, std::strerror(error));
    }
    data_ = static_cast<const unsigned char*>(mapped);
    // Windows are read in a random order: no read-ahead beyond the pages touched.
    ::madvise(mapped, mappedBytes_, MADV_RANDOM);
  } else {
    ::close(fd);
  }
  try {
    if (mappedBytes_ >= sizeof kTokenFileMagic && std::memcmp(data_, kTokenFileMagic, sizeof kTokenFileMagic) == 0) {
      STRATA_CHECK(mappedBytes_ >= kTokenFileHeaderBytes,
                   "token file {}: truncated: {} bytes, less than its {}-byte header", path.string(), mappedBytes_,
                   kTokenFileHeaderBytes);
      headerBytes_ = kTokenFileHeaderBytes;
      const std::uint32_t width = readLittle32(data_ + 8);
      STRATA_CHECK(width == 2 || width == 4, "token file {}: its header gives {} bytes per id; expected 2 or 4",
                   path.string(), width);
      tokenBytes_ = static_cast<int>(width);
      vocabulary_ = readLittle32(data_ + 12);
      const std::uint64_t count = readLittle64(data_ + 16);
      const std::size_t body = mappedBytes_ - headerBytes_;
      STRATA_CHECK(count <= body / width && body == count * width,
                   "token file {}: its header says {} ids ({} bytes), but the file holds {} bytes after the header "
                   "({})",
                   path.string(), count, count * width, body, body < count * width ? "truncated" : "trailing bytes");
      count_ = static_cast<std::int64_t>(count);
    } else {
      tokenBytes_ = rawTokenBytes;
      STRATA_CHECK(mappedBytes_ % static_cast<std::size_t>(tokenBytes_) == 0,
                   "token file {}: {} bytes is not a whole number of {}-byte ids (truncated? a raw file of uint32 ids "
                   "needs --token-bytes 4)",
                   path.string(), mappedBytes_, tokenBytes_);
      count_ = static_cast<std::int64_t>(mappedBytes_ / static_cast<std::size_t>(tokenBytes_));
    }
  } catch (...) {
    if (data_ != nullptr) {
      ::munmap(const_cast<unsigned char*>(data_), mappedBytes_);
    }
    throw;
  }
}

TokenFile::~TokenFile() {
  if (data_ != nullptr) {
    ::munmap(const_cast<unsigned char*>(data_), mappedBytes_);
  }
}

void TokenFile::read(std::int64_t first, std::span<std::int64_t> out, std::int64_t limit) const {
  const auto n = static_cast<std::int64_t>(out.size());
  STRATA_CHECK(first >= 0 && first + n <= count_, "token file {}: ids [{}, {}) are outside its {} ids", path_.string(),
               first, first + n, count_);
  const unsigned char* p =
      data_ + headerBytes_ + static_cast<std::size_t>(first) * static_cast<std::size_t>(tokenBytes_);
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t id = 0;
    if (tokenBytes_ == 2) {
      id = static_cast<std::int64_t>(p[2 * i] | (p[2 * i + 1] << 8));
    } else {
      id = static_cast<std::int64_t>(readLittle32(p + 4 * i));
    }
    if (limit > 0 && id >= limit) {
      fail("token file {}: id {} at id index {} (byte offset {}) is outside the model's vocabulary of {}",
           path_.string(), id, first + i,
           headerBytes_ + static_cast<std::size_t>(first + i) * static_cast<std::size_t>(tokenBytes_), limit);
    }
    out[static_cast<std::size_t>(i)] = id;
  }
}

void writeTokenFile(const std::filesystem::path& path, std::span<const std::int64_t> ids, std::int64_t vocabulary) {
  std::int64_t largest = vocabulary > 0 ? vocabulary - 1 : 0;
  for (const std::int64_t id : ids) {
    STRATA_CHECK(id >= 0 && id <= 0xffffffffLL, "{}: token id {} does not fit a token file", path.string(), id);
    STRATA_CHECK(vocabulary <= 0 || id < vocabulary, "{}: token id {} is outside the vocabulary of {}", path.string(),
                 id, vocabulary);
    largest = std::max(largest, id);
  }
  const int width = largest <= 0xffff ? 2 : 4;
  std::vector<unsigned char> bytes(kTokenFileMagic, kTokenFileMagic + sizeof kTokenFileMagic);
  putLittle(bytes, static_cast<std::uint64_t>(width), 4);
  putLittle(bytes, static_cast<std::uint64_t>(std::max<std::int64_t>(vocabulary, 0)), 4);
  putLittle(bytes, ids.size(), 8);
  putLittle(bytes, 0, 8);
  bytes.reserve(bytes.size() + ids.size() * static_cast<std::size_t>(width));
  for (const std::int64_t id : ids) {
    putLittle(bytes, static_cast<std::uint64_t>(id), width);
  }
  const std::filesystem::path temporary = path.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      fail("{}: cannot write the token file ({} bytes)", path.string(), bytes.size());
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::filesystem::remove(temporary, ec);
    fail("{}: cannot move the token file into place: {}", path.string(), ec.message());
  }
}

}  // namespace strata
