#pragma once

// The TcpStore wire protocol. Every message is a frame: u32 payload length (little endian) then the payload.
// Requests start with a StoreCommand byte; fields are u32-length-prefixed strings and little-endian integers.
//   Set   key value            -> (empty)
//   Get   key                  -> u8 found, value
//   Add   key i64 delta        -> i64 new value
//   Check u32 n, n keys        -> u8 all present
//   Wait  i64 timeoutMs, u32 n, n keys -> u32 m, m missing keys (m == 0: all arrived)

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::detail {

using Bytes = std::vector<std::uint8_t>;

enum class StoreCommand : std::uint8_t { Set = 1, Get = 2, Add = 3, Check = 4, Wait = 5 };

inline constexpr std::uint32_t kMaxFrameBytes = 1U << 30;

void putU8(Bytes& out, std::uint8_t value);
void putU32(Bytes& out, std::uint32_t value);
void putI64(Bytes& out, std::int64_t value);
void putString(Bytes& out, std::string_view value);
void putBytes(Bytes& out, const Bytes& value);
// Prepends the u32 length header to a payload.
Bytes frame(const Bytes& payload);

// Reads the fields of one payload; throws Error on a truncated payload.
class FrameReader {
 public:
  explicit FrameReader(const Bytes& payload) : payload_(payload) {}
  std::uint8_t u8();
  std::uint32_t u32();
  std::int64_t i64();
  std::string string();
  Bytes bytes();
  bool done() const { return pos_ == payload_.size(); }
  std::size_t remaining() const { return payload_.size() - pos_; }

 private:
  const std::uint8_t* take(std::size_t n);

  const Bytes& payload_;
  std::size_t pos_ = 0;
};

// Blocking socket helpers (MSG_NOSIGNAL, EINTR-safe). sendAll throws Error on failure; recvFrame waits until
// `deadline` and throws Error on timeout or when the peer closes the connection.
void sendAll(int fd, const Bytes& data);
Bytes recvFrame(int fd, std::chrono::steady_clock::time_point deadline);

}  // namespace strata::detail
