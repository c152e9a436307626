#include "store_requests.h"

#include <algorithm>
#include <charconv>

#include "strata/error.h"

namespace strata::detail {

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
      value += delta;
      const std::string text = std::to_string(value);
      stored.assign(text.begin(), text.end());
      putI64(out, value);
      reply_(client, out);
      answerWaiters(now);
      return;
    }
    case StoreCommand::Check: {
      std::vector<std::string> keys(in.u32());
      for (std::string& key : keys) {
        key = in.string();
      }
      putU8(out, missing(keys).empty() ? 1 : 0);
      reply_(client, out);
      return;
    }
    case StoreCommand::Wait: {
      const std::int64_t timeoutMs = in.i64();
      std::vector<std::string> keys(in.u32());
      for (std::string& key : keys) {
        key = in.string();
      }
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
  STRATA_CHECK(size <= kMaxFrameBytes, "malformed store message: frame of {} bytes exceeds the limit of {} bytes",
               size, kMaxFrameBytes);
  if (received.size() < 4 + static_cast<std::size_t>(size)) {
    return std::nullopt;
  }
  Bytes payload(received.begin() + 4, received.begin() + 4 + size);
  received.erase(received.begin(), received.begin() + 4 + size);
  return payload;
}

}  // namespace strata::detail
