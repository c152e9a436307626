#include "ps_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "ps_protocol.h"
#include "strata/error.h"

namespace strata::ps {
namespace {

constexpr char kCheckpointMagic[8] = {'S', 'P', 'S', 'C', 'K', 'P', 'T', '1'};

class Writer {
 public:
  void bytes(const void* data, std::size_t size) {
    const auto* p = static_cast<const char*>(data);
    buffer_.insert(buffer_.end(), p, p + size);
  }
  template <typename T>
  void value(const T& v) {
    bytes(&v, sizeof v);
  }
  void text(const std::string& s) {
    value<std::uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  const std::vector<char>& buffer() const { return buffer_; }

 private:
  std::vector<char> buffer_;
};

class Reader {
 public:
  Reader(std::string path, std::ifstream& in) : path_(std::move(path)), in_(in) {}
  void bytes(void* data, std::size_t size) {
    if (!in_.read(static_cast<char*>(data), static_cast<std::streamsize>(size))) {
      fail("ps: the server checkpoint {} is truncated", path_);
    }
  }
  template <typename T>
  T value() {
    T v{};
    bytes(&v, sizeof v);
    return v;
  }
  std::string text() {
    const auto size = value<std::uint64_t>();
    if (size > (1U << 20)) {
      fail("ps: the server checkpoint {} is damaged (a text of {} bytes)", path_, size);
    }
    std::string s(size, '\0');
    bytes(s.data(), size);
    return s;
  }

 private:
  std::string path_;
  std::ifstream& in_;
};

void writeHeader(Writer& w, const ServerCheckpoint& c) {
  w.bytes(kCheckpointMagic, sizeof kCheckpointMagic);
  w.text(c.jobId);
  const std::vector<std::byte> layout = encodeLayout(c.layout);
  w.value<std::uint64_t>(layout.size());
  w.bytes(layout.data(), layout.size());
  w.value(c.version);
  w.value(c.restarts);
  w.value(c.optimizerSteps);
  w.value<std::uint64_t>(c.lastSequence.size());
  for (std::size_t i = 0; i < c.lastSequence.size(); ++i) {
    w.value(c.lastSequence[i]);
    w.value(c.clock[i]);
  }
}

}  // namespace

void writeServerCheckpoint(const std::string& path, const ServerCheckpoint& checkpoint) {
  Writer w;
  writeHeader(w, checkpoint);
  for (const auto* list : {&checkpoint.values, &checkpoint.buffers, &checkpoint.optimizerState}) {
    w.value<std::uint64_t>(list->size());
    for (const Tensor& t : *list) {
      w.value<std::uint64_t>(t.bytes());
      w.bytes(t.rawData(), t.bytes());
    }
  }
  const std::string temporary = path + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    fail("ps: cannot write the server checkpoint {}: {}", temporary, std::strerror(errno));
  }
  std::size_t done = 0;
  const std::vector<char>& bytes = w.buffer();
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      const int error = errno;
      ::close(fd);
      fail("ps: cannot write the server checkpoint {}: {}", temporary, std::strerror(error));
    }
    done += static_cast<std::size_t>(n);
  }
  // The data reaches the disk before the rename makes it the checkpoint: a crash leaves the old one or the new one.
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || std::rename(temporary.c_str(), path.c_str()) != 0) {
    fail("ps: cannot publish the server checkpoint {}: {}", path, std::strerror(errno));
  }
}

std::optional<ServerCheckpoint> readServerCheckpointHeader(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return std::nullopt;
  }
  Reader r(path, in);
  char magic[8];
  r.bytes(magic, sizeof magic);
  if (std::memcmp(magic, kCheckpointMagic, sizeof kCheckpointMagic) != 0) {
    fail("ps: {} is not a parameter-server checkpoint", path);
  }
  ServerCheckpoint c;
  c.jobId = r.text();
  const auto layoutSize = r.value<std::uint64_t>();
  if (layoutSize > (std::uint64_t{1} << 24)) {
    fail("ps: the server checkpoint {} is damaged (a layout of {} bytes)", path, layoutSize);
  }
  std::vector<std::byte> layout(layoutSize);
  r.bytes(layout.data(), layout.size());
  std::vector<std::byte> header =
      encodeHeader(Header{.kind = static_cast<std::uint16_t>(Kind::Init), .worker = 0, .frames = 1});
  std::vector<Frame> frames{Frame(header.data(), header.size()), Frame(layout.data(), layout.size())};
  ServerView view;
  const Verdict verdict = validateRequest(frames, view);
  if (!verdict.layout) {
    fail("ps: the server checkpoint {} holds a damaged layout: {}", path, verdict.error);
  }
  c.layout = *verdict.layout;
  c.version = r.value<std::int64_t>();
  c.restarts = r.value<std::int64_t>();
  c.optimizerSteps = r.value<std::int64_t>();
  const auto workers = r.value<std::uint64_t>();
  if (workers > (1U << 20)) {
    fail("ps: the server checkpoint {} is damaged ({} workers)", path, workers);
  }
  for (std::uint64_t i = 0; i < workers; ++i) {
    c.lastSequence.push_back(r.value<std::uint64_t>());
    c.clock.push_back(r.value<std::int64_t>());
  }
  c.tensorsOffset = static_cast<std::uint64_t>(in.tellg());
  return c;
}

void readServerCheckpointTensors(const std::string& path, ServerCheckpoint& into) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(into.tensorsOffset));
  Reader r(path, in);
  for (auto* list : {&into.values, &into.buffers, &into.optimizerState}) {
    const auto count = r.value<std::uint64_t>();
    if (count != list->size()) {
      fail("ps: the server checkpoint {} holds {} tensors where {} were expected", path, count, list->size());
    }
    for (Tensor& t : *list) {
      const auto bytes = r.value<std::uint64_t>();
      if (bytes != t.bytes()) {
        fail("ps: the server checkpoint {} holds a tensor of {} bytes where {} were expected", path, bytes, t.bytes());
      }
      r.bytes(t.rawData(), t.bytes());
    }
  }
}

}  // namespace strata::ps
