#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

// A key-value store shared by the ranks of a job (the role of c10d's Store): rendezvous, bootstrapping process
// groups and the watchdog's bookkeeping. All methods are thread-safe.
class Store {
 public:
  using Bytes = std::vector<std::uint8_t>;

  virtual ~Store() = default;

  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Blocks until `key` exists; throws Error naming the key after `timeout`.
  virtual Bytes get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds `delta` to the counter at `key` (created at 0, stored as decimal text) and returns the new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // Whether all `keys` exist, without blocking.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Blocks until all `keys` exist or `timeout` passes; returns the keys still missing (empty when all arrived).
  virtual std::vector<std::string> tryWait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;

  // Like tryWait, but throws Error naming the missing keys on timeout.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  void setString(const std::string& key, std::string_view value);
  std::string getString(const std::string& key, std::chrono::milliseconds timeout);
};

// Note [Departed ranks]: the key the launcher writes (its value: why) when a rank of a job whose strategy tolerates
// losing workers has died; strategies and their roles (a parameter server's SSP clock) stop waiting for it.
inline std::string departedRankKey(int rank) {
  return "job/departed/" + std::to_string(rank);
}

}  // namespace strata
