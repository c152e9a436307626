#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "strata/comm/store.h"

namespace strata {

// A Store in process memory: multi-rank unit tests run ranks as threads sharing one of these.
class InMemoryStore final : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  std::vector<std::string> tryWait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  std::vector<std::string> missingLocked(const std::vector<std::string>& keys) const;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Bytes> data_;
};

}  // namespace strata
