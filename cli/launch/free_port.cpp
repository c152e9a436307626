#include "launch/free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "strata/error.h"

namespace strata::cli::detail {

int freeTcpPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    fail("cannot find a free TCP port: socket failed: {}", std::strerror(errno));
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = 0;  // the kernel picks an unused port
  socklen_t length = sizeof(address);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int error = errno;
    ::close(fd);
    fail("cannot find a free TCP port: {}", std::strerror(error));
  }
  // Bound but never listening: closing leaves no TIME_WAIT behind, so the store can bind the port at once.
  ::close(fd);
  return ntohs(address.sin_port);
}

}  // namespace strata::cli::detail
