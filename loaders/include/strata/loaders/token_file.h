#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace strata {

// Note [Token files]: a language model's data is a flat file of token ids, memory-mapped and never read whole.
// Two layouts are accepted:
// - Strata's: a 32-byte header, then the ids little-endian: "STRATOK1", uint32 bytes per id (2 or 4), uint32
//   vocabulary size (0: not stated), uint64 id count, 8 reserved bytes (0). The header states what the ids are,
//   so a truncated file or an id beyond the vocabulary is found and named.
// - Raw ids with no header, nanoGPT's train.bin/val.bin: uint16 by default (`rawTokenBytes` says otherwise).
inline constexpr char kTokenFileMagic[8] = {'S', 'T', 'R', 'A', 'T', 'O', 'K', '1'};
inline constexpr std::size_t kTokenFileHeaderBytes = 32;

// A read-only mapping of a token file. Throws Error naming the file when it cannot be opened or mapped, when its
// size does not match its header or its id width (truncated), or when its header is malformed.
class TokenFile {
 public:
  TokenFile(const std::filesystem::path& path, int rawTokenBytes = 2);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::int64_t size() const { return count_; }  // ids in the file
  int tokenBytes() const { return tokenBytes_; }
  std::int64_t vocabulary() const { return vocabulary_; }  // 0: not stated (raw files)
  bool hasHeader() const { return headerBytes_ > 0; }
  // Ids [first, first + out.size()) widened to int64; throws Error naming the file when `limit` > 0 and an id is
  // not below it (its position in the file, as an id index and a byte offset).
  void read(std::int64_t first, std::span<std::int64_t> out, std::int64_t limit) const;

 private:
  std::filesystem::path path_;
  const unsigned char* data_ = nullptr;  // the whole mapping, header included
  std::size_t mappedBytes_ = 0;
  std::size_t headerBytes_ = 0;
  int tokenBytes_ = 2;
  std::int64_t vocabulary_ = 0;
  std::int64_t count_ = 0;
};

// Writes `ids` in Strata's layout (atomically: to a temporary name, then renamed), with the narrowest id width
// (2 bytes when every id and the vocabulary fit in 16 bits, else 4). Throws Error naming the file on failure.
void writeTokenFile(const std::filesystem::path& path, std::span<const std::int64_t> ids, std::int64_t vocabulary);

}  // namespace strata
