#pragma once

// The launcher's children's stdout and stderr, passed on to its own line by line with the child's prefix
// ("[rank 3] ...", "[ps-server 0] ..."), so the lines of several ranks interleave whole.

#include <unistd.h>

#include <string>

namespace strata::cli::detail {

// One child's stdout or stderr: the read end of its pipe (non-blocking), where its lines go, and the start of a line
// not yet ended.
struct ChildStream {
  int fd = -1;
  int target = STDOUT_FILENO;
  std::string pending;
};

// Reads what is there and passes on complete lines, each prefixed "[label] "; closes the stream at EOF (passing on a
// last unended line with a newline added). A line longer than 1 MiB is passed on in pieces.
void pumpChildStream(ChildStream& stream, const std::string& label);

// After the child has exited: what is left in the pipe, then the last partial line.
void drainChildStream(ChildStream& stream, const std::string& label);

void closeChildStream(ChildStream& stream);

}  // namespace strata::cli::detail
