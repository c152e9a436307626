#include "launch/child_output.h"

#include <cerrno>

#include <fmt/format.h>

namespace strata::cli::detail {

// Longest line kept whole; a longer run of bytes without a newline is passed on in pieces.
constexpr std::size_t kMaxChildLine = 1 << 20;

void writeAllOf(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return;  // the reader went away; nothing sensible left to do with the line
    }
    done += static_cast<std::size_t>(n);
  }
}

void pumpChildStream(ChildStream& stream, const std::string& label) {
  char buffer[65536];
  while (stream.fd >= 0) {
    const ssize_t n = ::read(stream.fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return;  // EAGAIN: nothing more for now
    }
    if (n == 0) {
      if (!stream.pending.empty()) {
        writeAllOf(stream.target, fmt::format("[{}] {}\n", label, stream.pending));
        stream.pending.clear();
      }
      closeChildStream(stream);
      return;
    }
    stream.pending.append(buffer, static_cast<std::size_t>(n));
    std::string lines;
    std::size_t begin = 0;
    for (std::size_t newline; (newline = stream.pending.find('\n', begin)) != std::string::npos; begin = newline + 1) {
      lines += fmt::format("[{}] ", label);
      lines.append(stream.pending, begin, newline + 1 - begin);
    }
    stream.pending.erase(0, begin);
    if (stream.pending.size() >= kMaxChildLine) {
      lines += fmt::format("[{}] {}\n", label, stream.pending);
      stream.pending.clear();
    }
    // One write per read keeps each line whole in the launcher's output.
    writeAllOf(stream.target, lines);
  }
}

void drainChildStream(ChildStream& stream, const std::string& label) {
  while (stream.fd >= 0) {
    const int before = stream.fd;
    pumpChildStream(stream, label);
    if (stream.fd == before) {
      // EAGAIN with the writer gone can only mean someone else holds the pipe open; do not wait for them.
      if (!stream.pending.empty()) {
        writeAllOf(stream.target, fmt::format("[{}] {}\n", label, stream.pending));
        stream.pending.clear();
      }
      closeChildStream(stream);
    }
  }
}

void closeChildStream(ChildStream& stream) {
  if (stream.fd >= 0) {
    ::close(stream.fd);
    stream.fd = -1;
  }
}

}  // namespace strata::cli::detail
