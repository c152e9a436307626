#include "run/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "run/durable_files.h"
#include "run/run_outputs.h"
#include "strata/error.h"
#include "strata/loaders/tensor_proto_io.h"

namespace fs = std::filesystem;

namespace strata::cli {
namespace {

// Format 3 adds a CRC32 and a size per tensor file to the manifests (format 2 had neither).
constexpr int kFormat = 3;

nlohmann::json readJson(const fs::path& file, const char* what) {
  std::ifstream in(file);
  if (!in) {
    fail("{}: cannot read the checkpoint's {}", file.string(), what);
  }
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail("{}: corrupt checkpoint {}: {}", file.string(), what, e.what());
  }
}

fs::path rankDir(const fs::path& dir, int rank) {
  return dir / fmt::format("rank{}", rank);
}

std::ifstream openForReading(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    fail("{}: cannot open checkpoint file ({})", file.string(),
         fs::exists(file) ? "permission denied or not a file" : "no such file");
  }
  return in;
}

[[noreturn]] void cannotRead(const fs::path& file) {
  fail("{}: cannot read checkpoint file: {}", file.string(), std::strerror(errno));
}

// The whole file in one read (its size from the stream, not a byte at a time).
std::string readBytes(const fs::path& file) {
  std::ifstream in = openForReading(file);
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  std::string bytes(static_cast<std::size_t>(std::max<std::streamoff>(size, 0)), '\0');
  if (size < 0 || !in.read(bytes.data(), size)) {
    cannotRead(file);
  }
  return bytes;
}

uLong crc32Update(uLong crc, const char* data, std::size_t size) {
  for (std::size_t at = 0; at < size;) {
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(size - at, 1U << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data + at), chunk);
    at += chunk;
  }
  return crc;
}

std::uint32_t crc32Of(const std::string& bytes) {
  return static_cast<std::uint32_t>(crc32Update(crc32(0L, Z_NULL, 0), bytes.data(), bytes.size()));
}

struct FileChecksum {
  std::size_t bytes = 0;
  std::uint32_t crc32 = 0;
};

// Size and CRC32 of a file read in 1 MiB pieces: a large tensor's file is not held in memory a second time.
FileChecksum checksumOf(const fs::path& file) {
  std::ifstream in = openForReading(file);
  std::vector<char> piece(1U << 20);
  FileChecksum sum;
  uLong crc = crc32(0L, Z_NULL, 0);
  while (in) {
    in.read(piece.data(), static_cast<std::streamsize>(piece.size()));
    const auto got = static_cast<std::size_t>(in.gcount());
    crc = crc32Update(crc, piece.data(), got);
    sum.bytes += got;
  }
  if (!in.eof()) {
    cannotRead(file);
  }
  sum.crc32 = static_cast<std::uint32_t>(crc);
  return sum;
}

// Note [Checkpoint test hook]: STRATA_TEST_CHECKPOINT_KILL=R:N makes rank R kill itself with SIGKILL after writing
// the first tensor file of its N-th checkpoint (counted from 1 in this process), so tests/multirank can kill a rank
// mid-write deterministically. Unset, it costs one getenv per checkpoint.
bool killRequested(int rank, int checkpoint) {
  const char* value = std::getenv("STRATA_TEST_CHECKPOINT_KILL");
  int killRank = -1;
  int killCheckpoint = -1;
  return value != nullptr && std::sscanf(value, "%d:%d", &killRank, &killCheckpoint) == 2 && killRank == rank &&
         killCheckpoint == checkpoint;
}

class Writer final : public StateWriter {
 public:
  Writer(fs::path dir, bool killAfterFirstTensor) : dir_(std::move(dir)), kill_(killAfterFirstTensor) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  // The manifest goes last: a rank directory with a manifest is complete. A writer left by an exception (a full
  // disk) writes none and removes its partial files, so the commit finds no manifest and keeps the previous
  // checkpoint, and the space is given back.
  ~Writer() override {
    if (std::uncaught_exceptions() > uncaught_) {
      std::error_code ignored;
      fs::remove_all(dir_, ignored);
      return;
    }
    try {
      syncDirectory(dir_);  // the tensor files' entries, before the manifest that lists them
      writeJsonAtomically(dir_ / "manifest.json", {{"tensors", tensors_}, {"text", text_}});
      syncDirectory(dir_);
    } catch (const std::exception& e) {  // the commit finds no manifest and says so
      spdlog::error("{}", e.what());
      std::error_code ignored;
      fs::remove(dir_ / "manifest.json", ignored);
    }
  }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  void putTensor(const std::string& key, const Tensor& tensor) override {
    STRATA_CHECK(!tensors_.contains(key), "checkpoint: tensor '{}' written twice", key);
    const std::string file = fmt::format("t{}.pb", tensors_.size());
    writeTensorProto(dir_ / file, tensor, key);
    syncFile(dir_ / file);  // Note [Checkpoint durability]
    // The checksum is of the bytes as they are in the file (read back from the page cache).
    const FileChecksum sum = checksumOf(dir_ / file);
    tensors_[key] = {{"file", file}, {"bytes", sum.bytes}, {"crc32", sum.crc32}};
    if (kill_) {
      std::fflush(nullptr);
      ::raise(SIGKILL);
    }
  }
  void putText(const std::string& key, std::string_view text) override { text_[key] = std::string(text); }

 private:
  fs::path dir_;
  bool kill_;
  int uncaught_ = std::uncaught_exceptions();
  nlohmann::json tensors_ = nlohmann::json::object();
  nlohmann::json text_ = nlohmann::json::object();
};

// A tensor file as the manifest lists it.
struct TensorFile {
  fs::path path;
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;
};

class Reader final : public StateReader {
 public:
  Reader(fs::path dir, int worldSize) : dir_(std::move(dir)) {
    for (int r = 0; r < worldSize; ++r) {
      const fs::path manifestFile = rankDir(dir_, r) / "manifest.json";
      const nlohmann::json manifest = readJson(manifestFile, "manifest");
      try {
        for (const auto& [key, entry] : manifest.at("tensors").items()) {
          if (!entry.is_object() || !entry.contains("crc32") || !entry.contains("bytes")) {
            fail(
                "{}: tensor '{}' has no checksum; this Strata resumes only from checkpoints whose tensor files carry "
                "a CRC32 (format {}), so that a damaged file is found, not loaded",
                manifestFile.string(), key, kFormat);
          }
          tensors_[key] = TensorFile{rankDir(dir_, r) / entry.at("file").get<std::string>(),
                                     entry.at("bytes").get<std::uint64_t>(), entry.at("crc32").get<std::uint32_t>()};
        }
        for (const auto& [key, value] : manifest.at("text").items()) {
          text_[key] = value.get<std::string>();
        }
      } catch (const nlohmann::json::exception& e) {
        fail("{}: corrupt checkpoint manifest: {}", manifestFile.string(), e.what());
      }
    }
  }

  bool has(const std::string& key) const override { return tensors_.contains(key) || text_.contains(key); }

  // Note [Checkpoint checksums]: the size and CRC32 of each tensor file are checked before it is parsed, so a
  // truncated, overwritten or bit-flipped file is named with its tensor instead of failing in protobuf or, worse,
  // loading as other weights of the same shape.
  void getTensor(const std::string& key, Tensor destination) override {
    const auto it = tensors_.find(key);
    if (it == tensors_.end()) {
      fail("{}: the checkpoint has no tensor '{}' (written for another model or strategy?)", dir_.string(), key);
    }
    const TensorFile& file = it->second;
    const std::string bytes = readBytes(file.path);
    if (bytes.size() != file.bytes) {
      fail("{}: tensor '{}' is damaged: the file has {} bytes, the manifest says {} (truncated or overwritten)",
           file.path.string(), key, bytes.size(), file.bytes);
    }
    const std::uint32_t crc = crc32Of(bytes);
    if (crc != file.crc32) {
      fail("{}: tensor '{}' is damaged: CRC32 {:08x}, the manifest says {:08x}", file.path.string(), key, crc,
           file.crc32);
    }
    const NamedTensor loaded = parseTensorProto(bytes, file.path);  // the bytes just checked, not a second read
    if (loaded.name != key) {
      fail("{}: holds tensor '{}', but the manifest lists it as '{}'", file.path.string(), loaded.name, key);
    }
    if (loaded.tensor.meta() != destination.meta()) {
      fail("{}: {} is {} in the checkpoint but {} in this run", file.path.string(), key,
           loaded.tensor.meta().toString(), destination.meta().toString());
    }
    destination.copyFrom(loaded.tensor);
  }

  std::string getText(const std::string& key) override {
    const auto it = text_.find(key);
    if (it == text_.end()) {
      fail("{}: the checkpoint has no entry '{}' (written for another model or strategy?)", dir_.string(), key);
    }
    return it->second;
  }

 private:
  fs::path dir_;
  std::map<std::string, TensorFile> tensors_;
  std::map<std::string, std::string> text_;
};

// Note [Checkpoint publish]: the new checkpoint replaces the old one with one atomic renameat2(RENAME_EXCHANGE),
// so at every instant RUN_DIR/checkpoint is one whole checkpoint; the old one, now in checkpoint.tmp, is removed
// afterwards (a crash in between leaves it there, and the next save clears it). Filesystems without the exchange
// get two renames through checkpoint.old, which exists() and open() fall back to while checkpoint is missing.
// Before it, checkpoint.tmp's files and entries are on disk; after it, RUN_DIR's entries (Note [Checkpoint
// durability]).
void publish(const fs::path& temporary, const fs::path& dir) {
  syncDirectory(temporary);
  const fs::path runDir = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  if (!fs::exists(dir)) {
    fs::rename(temporary, dir);
    syncDirectory(runDir);
    return;
  }
  if (::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    syncDirectory(runDir);
    fs::remove_all(temporary);
    return;
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
    fail("checkpoint {}: cannot move the new checkpoint into place: {}; the previous checkpoint is kept", dir.string(),
         std::strerror(errno));
  }
  const fs::path old = dir.string() + ".old";
  fs::remove_all(old);
  fs::rename(dir, old);
  fs::rename(temporary, dir);
  syncDirectory(runDir);
  fs::remove_all(old);
}

// The published checkpoint directory: RUN_DIR/checkpoint, or checkpoint.old when a publish without the atomic
// exchange was interrupted between its two renames.
fs::path published(const fs::path& dir) {
  const fs::path old = dir.string() + ".old";
  if (!fs::exists(dir / "state.json") && fs::exists(old / "state.json")) {
    return old;
  }
  return dir;
}

}  // namespace

TensorProtoCheckpoints::TensorProtoCheckpoints(fs::path dir, int rank, int worldSize)
    : dir_(std::move(dir)), rank_(rank), worldSize_(worldSize) {}

bool TensorProtoCheckpoints::exists() const {
  return fs::exists(published(dir_) / "state.json");
}

std::unique_ptr<StateWriter> TensorProtoCheckpoints::beginWrite() {
  ++writes_;
  return std::make_unique<Writer>(rankDir(fs::path(dir_.string() + ".tmp"), rank_), killRequested(rank_, writes_));
}

void TensorProtoCheckpoints::commit() {
  const fs::path temporary = dir_.string() + ".tmp";
  nlohmann::json state = {{"format", kFormat}, {"world_size", worldSize_}};
  for (int r = 0; r < worldSize_; ++r) {
    const fs::path manifestFile = rankDir(temporary, r) / "manifest.json";
    if (!fs::exists(manifestFile)) {
      fail("checkpoint {}: rank {} wrote no manifest; the previous checkpoint is kept", temporary.string(), r);
    }
    const nlohmann::json manifest = readJson(manifestFile, "manifest");
    if (manifest.at("text").contains("trainer")) {
      state["trainer"] = nlohmann::json::parse(manifest.at("text").at("trainer").get<std::string>());
    }
  }
  // Directories of ranks beyond this world size are left over from an older, larger run.
  for (const fs::directory_entry& entry : fs::directory_iterator(temporary)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank", 0) == 0 && std::stoi(name.substr(4)) >= worldSize_) {
      fs::remove_all(entry.path());
    }
  }
  writeJsonAtomically(temporary / "state.json", state);
  publish(temporary, dir_);
}

std::unique_ptr<StateReader> TensorProtoCheckpoints::open() {
  const fs::path dir = published(dir_);
  const fs::path stateFile = dir / "state.json";
  if (!fs::exists(stateFile)) {
    fail("{}: no checkpoint to resume from (run with --save to write one)", stateFile.string());
  }
  const nlohmann::json state = readJson(stateFile, "state");
  if (state.value("format", 1) != kFormat) {
    fail("{}: checkpoint format {} was written by an older Strata; this one reads format {}", stateFile.string(),
         state.value("format", 1), kFormat);
  }
  return std::make_unique<Reader>(dir, state.at("world_size").get<int>());
}

}  // namespace strata::cli
