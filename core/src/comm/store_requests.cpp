#include "store_requests.h"

#include <algorithm>
#include <charconv>

#include "strata/error.h"

namespace strata::detail {
namespace {

constexpr std::chrono::milliseconds kMaxWait = std::chrono::hours(24 * 365);

// A request's key list: u32 n, then n strings. Each string takes at least its 4-byte length, so a count larger than
// a quarter of the bytes left is refused before anything is allocated for it (before, a request of a few bytes could
// make the server allocate up to 2^32 strings, 128 GiB; found by tests/fuzz/store_protocol_fuzzer).
std::vector<std::string> readKeys(FrameReader& in) {
  const std::uint32_t n = in.u32();
  STRATA_CHECK(n <= in.remaining() / 4, "malformed store message: {} keys announced, but only {} bytes follow", n,
               in.remaining());
  std::vector<std::string> keys(n);
  for (std::string& key : keys) {
    key = in.string();
  }
  return keys;
}

}  // namespace

std::vector<std::string> StoreRequests::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const std::string& key : keys) {
    if (!data_.contains(key)) {
      out.push_back(key);
    }
  }
  return out;
}

void StoreRequests::handle(int client, const Bytes& payload, Clock::time_point now) {
  FrameReader in(payload);
  const auto command = static_cast<StoreCommand>(in.u8());
  Bytes out;
  switch (command) {
    case StoreCommand::Set: {
      std::string key = in.string();
      data_[std::move(key)] = in.bytes();
      reply_(client, out);
      answerWaiters(now);
      return;
    }
    case StoreCommand::Get: {
      const auto it = data_.find(in.string());
      putU8(out, it != data_.end() ? 1 : 0);
      putBytes(out, it != data_.end() ? it->second : Bytes{});
      reply_(client, out);
      return;
    }
    case StoreCommand::Add: {
      std::string key = in.string();
      const std::int64_t delta = in.i64();
      Bytes& stored = data_[key];
      std::int64_t value = 0;
      if (!stored.empty()) {
        const char* begin = reinterpret_cast<const char*>(stored.data());
        const auto [end, ec] = std::from_chars(begin, begin + stored.size(), value);
        STRATA_CHECK(ec == std::errc() && end == begin + stored.size(), "key '{}' does not hold a counter", key);
      }
      std::int64_t sum = 0;
      STRATA_CHECK(!__builtin_add_overflow(value, delta, &sum),
                   "key '{}': adding {} to the counter {} overflows 64 bits", key, delta, value);
      value = sum;
      const std::string text = std::to_string(value);
      stored.assign(text.begin(), text.end());
      putI64(out, value);
      reply_(client, out);
      answerWaiters(now);
      return;
    }
    case StoreCommand::Check: {
      const std::vector<std::string> keys = readKeys(in);
      putU8(out, missing(keys).empty() ? 1 : 0);
      reply_(client, out);
      return;
    }
    case StoreCommand::Wait: {
      // Note [Wait deadlines]: the timeout comes off the wire; `now + timeout` in nanoseconds overflows (undefined
      // behaviour) past about 292 years, so it is clamped to [0, kMaxWait] (a year: "wait forever" in practice).
      const std::int64_t timeoutMs = std::clamp<std::int64_t>(in.i64(), 0, kMaxWait.count());
      std::vector<std::string> keys = readKeys(in);
      waiters_.push_back({client, std::move(keys), now + std::chrono::milliseconds(timeoutMs)});
      answerWaiters(now);
      return;
    }
  }
  fail("unknown store command {}", static_cast<int>(command));
}

void StoreRequests::answerWaiters(Clock::time_point now) {
  std::vector<std::pair<int, Bytes>> replies;
  std::erase_if(waiters_, [&](const Waiter& w) {
    const std::vector<std::string> left = missing(w.keys);
    if (!left.empty() && now < w.deadline) {
      return false;
    }
    Bytes out;
    putU32(out, static_cast<std::uint32_t>(left.size()));
    for (const std::string& key : left) {
      putString(out, key);
    }
    replies.emplace_back(w.client, std::move(out));
    return true;
  });
  for (const auto& [client, out] : replies) {
    reply_(client, out);
  }
}

void StoreRequests::dropClient(int client) {
  std::erase_if(waiters_, [client](const Waiter& w) { return w.client == client; });
}

std::optional<StoreRequests::Clock::time_point> StoreRequests::nextDeadline() const {
  if (waiters_.empty()) {
    return std::nullopt;
  }
  auto next = waiters_.front().deadline;
  for (const Waiter& w : waiters_) {
    next = std::min(next, w.deadline);
  }
  return next;
}

std::optional<Bytes> takeFrame(Bytes& received) {
  if (received.size() < 4) {
    return std::nullopt;
  }
  const Bytes header(received.begin(), received.begin() + 4);
  const std::uint32_t size = FrameReader(header).u32();
  STRATA_CHECK(size <= kMaxFrameBytes, "malformed store message: frame of {} bytes exceeds the limit of {} bytes", size,
               kMaxFrameBytes);
  if (received.size() < 4 + static_cast<std::size_t>(size)) {
    return std::nullopt;
  }
  Bytes payload(received.begin() + 4, received.begin() + 4 + size);
  received.erase(received.begin(), received.begin() + 4 + size);
  return payload;
}

}  // namespace strata::detail
