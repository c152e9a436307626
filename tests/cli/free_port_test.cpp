// cli/launch/free_port.cpp: the port a one-node job's store takes when no --master-port was given
// (Note [Standalone port]).
#include "launch/free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

#include <gtest/gtest.h>

namespace strata::cli {
namespace {

// Whether a listening socket can take `port` on every IPv4 address, as rank 0's store does.
bool storeCouldListenOn(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool listening =
      fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 && ::listen(fd, 1) == 0;
  if (fd >= 0) {
    ::close(fd);
  }
  return listening;
}

TEST(FreePortTest, GivesAPortTheStoreCanListenOnAtOnce) {
  const int port = detail::freeTcpPort();
  EXPECT_GT(port, 0);
  EXPECT_LE(port, 65535);
  EXPECT_TRUE(storeCouldListenOn(port)) << "port " << port;
}

}  // namespace
}  // namespace strata::cli
