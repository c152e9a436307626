// Fuzz target: the rendezvous store's wire protocol (core/src/comm/store_protocol.*, store_requests.*), as the
// TcpStore server meets it. The input is a script of what three clients send: records of
//   u8 client (mod 3), u8 n, n bytes received from that client, u8 milliseconds the clock then advances
// (a short last record takes what is left). After each record the server's frame splitter and request handler
// run as TcpStoreServer runs them; a malformed request must end in strata::Error (the server then drops that
// client), anything else escaping is a finding. Every reply must be a payload the client can frame.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "store_protocol.h"
#include "store_requests.h"
#include "strata/error.h"

using strata::detail::Bytes;
using strata::detail::StoreRequests;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr int kClients = 3;
  std::size_t replyBytes = 0;
  StoreRequests requests([&](int client, const Bytes& payload) {
    if (client < 0 || client >= kClients) {
      __builtin_trap();  // a reply to a client that never sent anything
    }
    replyBytes += strata::detail::frame(payload).size();
  });
  std::array<Bytes, kClients> received;
  std::array<bool, kClients> dropped{};
  auto now = StoreRequests::Clock::time_point{} + std::chrono::hours(1);
  std::size_t pos = 0;
  while (pos < size) {
    const int client = data[pos++] % kClients;
    std::size_t n = pos < size ? data[pos++] : 0;
    n = std::min(n, size - pos);
    if (!dropped[static_cast<std::size_t>(client)]) {
      Bytes& buffer = received[static_cast<std::size_t>(client)];
      buffer.insert(buffer.end(), data + pos, data + pos + n);
      try {
        while (auto payload = strata::detail::takeFrame(buffer)) {
          requests.handle(client, *payload, now);
        }
      } catch (const strata::Error&) {
        dropped[static_cast<std::size_t>(client)] = true;  // TcpStoreServer drops a misbehaving client
        requests.dropClient(client);
      }
    }
    pos += n;
    if (pos < size) {
      now += std::chrono::milliseconds(data[pos++]);
    }
    requests.answerWaiters(now);
  }
  return 0;
}
