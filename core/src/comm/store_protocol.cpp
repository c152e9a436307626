#include "store_protocol.h"

#include <cerrno>
#include <cstring>

#include <poll.h>
#include <sys/socket.h>

#include "strata/error.h"

namespace strata::detail {

void putU8(Bytes& out, std::uint8_t value) {
  out.push_back(value);
}

void putU32(Bytes& out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) {
    out.push_back(static_cast<std::uint8_t>(value >> (8 * i)));
  }
}

void putI64(Bytes& out, std::int64_t value) {
  const auto bits = static_cast<std::uint64_t>(value);
  for (int i = 0; i < 8; ++i) {
    out.push_back(static_cast<std::uint8_t>(bits >> (8 * i)));
  }
}

void putString(Bytes& out, std::string_view value) {
  putU32(out, static_cast<std::uint32_t>(value.size()));
  out.insert(out.end(), value.begin(), value.end());
}

void putBytes(Bytes& out, const Bytes& value) {
  putU32(out, static_cast<std::uint32_t>(value.size()));
  out.insert(out.end(), value.begin(), value.end());
}

Bytes frame(const Bytes& payload) {
  STRATA_CHECK(payload.size() <= kMaxFrameBytes, "store message of {} bytes exceeds the limit of {} bytes",
               payload.size(), kMaxFrameBytes);
  Bytes out;
  out.reserve(payload.size() + 4);
  putU32(out, static_cast<std::uint32_t>(payload.size()));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

const std::uint8_t* FrameReader::take(std::size_t n) {
  STRATA_CHECK(payload_.size() - pos_ >= n, "malformed store message: needs {} more bytes at offset {} of {}", n, pos_,
               payload_.size());
  const std::uint8_t* p = payload_.data() + pos_;
  pos_ += n;
  return p;
}

std::uint8_t FrameReader::u8() {
  return *take(1);
}

std::uint32_t FrameReader::u32() {
  const std::uint8_t* p = take(4);
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i) {
    value |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  }
  return value;
}

std::int64_t FrameReader::i64() {
  const std::uint8_t* p = take(8);
  std::uint64_t value = 0;
  for (int i = 0; i < 8; ++i) {
    value |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  }
  return static_cast<std::int64_t>(value);
}

std::string FrameReader::string() {
  const std::uint32_t n = u32();
  const std::uint8_t* p = take(n);
  return std::string(reinterpret_cast<const char*>(p), n);
}

Bytes FrameReader::bytes() {
  const std::uint32_t n = u32();
  const std::uint8_t* p = take(n);
  return Bytes(p, p + n);
}

void sendAll(int fd, const Bytes& data) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      fail("store connection: send failed: {}", std::strerror(errno));
    }
    sent += static_cast<std::size_t>(n);
  }
}

namespace {

void recvExact(int fd, std::uint8_t* out, std::size_t size, std::chrono::steady_clock::time_point deadline) {
  std::size_t got = 0;
  while (got < size) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      fail("store connection: no reply before the deadline");
    }
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) {
      fail("store connection: poll failed: {}", std::strerror(errno));
    }
    if (ready <= 0) {
      continue;
    }
    const ssize_t n = ::recv(fd, out + got, size - got, 0);
    if (n == 0) {
      fail("store connection closed by the server (has rank 0 exited?)");
    }
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) {
        continue;
      }
      fail("store connection: recv failed: {}", std::strerror(errno));
    }
    got += static_cast<std::size_t>(n);
  }
}

}  // namespace

Bytes recvFrame(int fd, std::chrono::steady_clock::time_point deadline) {
  std::uint8_t header[4];
  recvExact(fd, header, 4, deadline);
  Bytes headerBytes(header, header + 4);
  const std::uint32_t size = FrameReader(headerBytes).u32();
  STRATA_CHECK(size <= kMaxFrameBytes, "malformed store message: frame of {} bytes", size);
  Bytes payload(size);
  if (size > 0) {
    recvExact(fd, payload.data(), size, deadline);
  }
  return payload;
}

}  // namespace strata::detail
